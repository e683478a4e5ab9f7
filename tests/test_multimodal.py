"""Every multimodal architecture a release registers gets a verdict, judged as its runner judges the class it
holds: after ``apply``, the wrappers whose language model is an EAGLE-3 target are targets, the gate admits every
type of every target, and each other architecture is refused with its reason (on the real wheels)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import wheel_corpus
from helpers.cli import run_on as cli

from vllm_eagle3_patch.discovery import model_types
from vllm_eagle3_patch.eagle3.release import Release

TARGET_SHARE = {"0.17.1": 0.9, "0.21.0": 0.9, "0.33.0": 0.9, "0.34.0": 0.9}
"""Of the decoder-only multimodal architectures, the share that are EAGLE-3 targets after ``apply`` (83 of 92, 96 of
105, 113 of 124, 114 of 126; on 0.34.0 a class a package picks per platform counts by the class CUDA imports): the
others are refused with their reason, half of them because vLLM's proposer could not take the
embedding from their language model (upstream's ``LlamaModel`` in Phi-4-MM and Idefics3, the ASR models' nested
decoders, DiffusionGemma's ``Gemma4Model``)."""
SERVED_THROUGH_A_WRAPPER = (
    "Qwen2VLForConditionalGeneration",
    "InternVLChatModel",
    "LlavaNextForConditionalGeneration",
    "LlavaOnevisionForConditionalGeneration",
    "Glm4vForConditionalGeneration",
    "PaliGemmaForConditionalGeneration",
    "Phi3VForCausalLM",
    "DeepseekVLV2ForCausalLM",
    "KimiVLForConditionalGeneration",
    "Ovis",
    "Qwen2AudioForConditionalGeneration",
    "VoxtralForConditionalGeneration",
    "GraniteSpeechForConditionalGeneration",
    "UltravoxModel",  # its forward runs a local name for its language model
)
"""Vision-language and audio models teams serve, none native on 0.17.1."""
NO_EMBEDDING_FOR_THE_PROPOSER = {
    "Phi4MMForCausalLM": "phi4mm.py",  # upstream's collecting decoder, bare: self.model = LlamaModel(...)
    "Idefics3ForConditionalGeneration": "idefics3.py",  # Idefics3Model, its embedding in upstream's LlamaModel
    "FireRedASR2ForConditionalGeneration": "fireredasr2.py",  # FireRedASR2Model: a causal LM holds the embedding
}
"""Classes whose language model (what ``get_language_model()`` gives) has no ``model``, where vLLM's EAGLE proposer
takes the embedding it shares with the drafter, and where a read-only ``model`` answering it with itself is not
sound (a class other files share) or finds no embedding: the engine would fail to start, so they are refused, and
``apply`` leaves their own file as the wheel has it."""
ANSWERS_MODEL_WITH_ITSELF = {
    "AriaForConditionalGeneration": ("aria.py", "AriaTextModel"),  # a LlamaModel subclass of the wrapper's file
    "MolmoForCausalLM": ("molmo.py", "MolmoModel"),  # a decoder of its own file: self.model = MolmoModel(...)
    "QwenVLForConditionalGeneration": ("qwen.py", "QWenModel"),  # Qwen's text decoder, in self.transformer
    "GLM4VForCausalLM": ("chatglm.py", "ChatGLMModel"),  # ChatGLM's model, in self.transformer
}
"""Classes whose language model has no ``model`` but is a class of the file the tool patches for it, builds its
embedding, and has no ``model`` a property would hide: ``apply`` gives it a read-only ``model`` answering itself
(``multimodal.answers_model``), and they become targets."""


def architectures(package_dir) -> list[dict]:
    completed = cli(package_dir, "status", "--architectures", "--json")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)["architectures"]


@dataclass(frozen=True)
class Applied:
    """One release's tree, its verdicts before ``apply`` and after (one ``apply`` shared by this file's tests)."""

    package_dir: Path
    before: dict[str, dict]
    after: dict[str, dict]


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    trees: dict[str, Applied] = {}

    def get(version: str) -> Applied:
        if version not in trees:
            tree = tmp_path_factory.mktemp(f"vllm-{version}")
            shutil.copytree(wheel_corpus.release_tree(version), tree, dirs_exist_ok=True)
            package_dir = tree / "vllm"
            before = {v["architecture"]: v for v in architectures(package_dir)}
            assert cli(package_dir, "apply").returncode == 0
            after = {v["architecture"]: v for v in architectures(package_dir)}
            trees[version] = Applied(package_dir, before, after)
        return trees[version]

    return get


@pytest.mark.parametrize("version", sorted(TARGET_SHARE))
def test_multimodal_architectures_are_targets_after_apply_and_the_others_say_why(applied, version):
    tree = applied(version)
    before = [v for v in tree.before.values() if v["kind"] == "multimodal"]
    assert len(before) == len(Release(tree.package_dir).multimodal_models)
    after = {a: v for a, v in tree.after.items() if v["kind"] == "multimodal"}
    assert all(v["reason"] for v in after.values())
    encoder_decoder = [a for a, v in after.items() if not v["decoder_only"]]
    assert "WhisperForConditionalGeneration" in encoder_decoder
    assert all(after[a]["verdict"] == "refused" and "encoder-decoder" in after[a]["reason"] for a in encoder_decoder)
    decoder_only = [v for a, v in after.items() if a not in encoder_decoder]
    targets = [v for v in decoder_only if v["verdict"] in ("native", "patched")]
    assert len(targets) >= TARGET_SHARE[version] * len(decoder_only), f"{len(targets)} of {len(decoder_only)}"
    assert {v["verdict"] for v in after.values()} <= {"native", "patched", "refused"}  # nothing left for apply


def test_a_class_whose_language_model_has_no_embedding_for_the_proposer_is_refused(applied):
    tree = applied("0.17.1")
    wheel = wheel_corpus.release_tree("0.17.1") / "vllm" / "model_executor" / "models"
    for architecture, own_file in NO_EMBEDDING_FOR_THE_PROPOSER.items():
        for verdict in (tree.before[architecture], tree.after[architecture]):
            assert verdict["verdict"] == "refused", verdict
            assert "has no self.model: vLLM's EAGLE proposer takes the token embedding" in verdict["reason"], verdict
        models = tree.package_dir / "model_executor" / "models"
        assert (models / own_file).read_bytes() == (wheel / own_file).read_bytes(), own_file


def test_a_language_model_of_the_patched_file_answers_model_with_itself(applied):
    tree = applied("0.17.1")
    models = tree.package_dir / "model_executor" / "models"
    for architecture, (file, language_model) in ANSWERS_MODEL_WITH_ITSELF.items():
        assert tree.before[architecture]["verdict"] == "patchable", tree.before[architecture]
        assert tree.after[architecture]["verdict"] == "patched", tree.after[architecture]
        text = (models / file).read_text()
        body = text[text.index(f"class {language_model}(") :]
        body = body[: body.find("\nclass ", 1) if "\nclass " in body[1:] else len(body)]
        assert "    def model(self):  # vllm-eagle3-patch\n" in body and "        return self\n" in body, body


def test_the_wrappers_teams_serve_become_targets(applied):
    tree = applied("0.17.1")
    assert all(tree.before[a]["verdict"] in ("patchable", "gated") for a in SERVED_THROUGH_A_WRAPPER), tree.before
    assert all(tree.after[a]["verdict"] == "patched" for a in SERVED_THROUGH_A_WRAPPER), tree.after
    assert "DeepSeek-V2/V3" in tree.after["KimiVLForConditionalGeneration"]["reason"]  # its language model's family
    assert tree.after["KimiK25ForConditionalGeneration"]["verdict"] == "patched"
    assert tree.after["Gemma3ForConditionalGeneration"]["verdict"] == "patched"


@pytest.mark.parametrize("version", ["0.17.1", "0.21.0"])
def test_the_patched_gate_admits_every_type_of_every_target(applied, version):
    """Read with the release's own gate test (a whitelist entry as a substring of the model type) on the file
    ``apply`` wrote: no architecture ``status`` calls native or patched is refused by the gate."""
    tree = applied(version)
    patched_gate = Release(tree.package_dir)
    targets = [v for v in tree.after.values() if v["verdict"] in ("native", "patched")]
    refused = [
        (v["architecture"], t)
        for v in targets
        for t in model_types(v["architecture"], v["module"])
        if not patched_gate.gate_admits(t)
    ]
    assert len(targets) > 150 and refused == []


def checkpoint(directory, architecture: str, text: dict, **fields) -> str:
    """A multimodal checkpoint's ``config.json``: the wrapper's architecture, its text config nested."""
    directory.mkdir()
    config = {"architectures": [architecture], "text_config": {"num_hidden_layers": 8, **text}, **fields}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def model_verdict(package_dir, model: str) -> tuple[int, str]:
    completed = cli(package_dir, "status", "--model", model, "--check", "--json")
    return completed.returncode, json.loads(completed.stdout)["model"]["verdict"]


def test_status_says_why_a_checkpoint_without_an_embedding_for_the_proposer_is_refused(applied, tmp_path):
    phi4mm = checkpoint(tmp_path / "phi4mm", "Phi4MMForCausalLM", {"model_type": "phi4mm"}, model_type="phi4mm")
    code, verdict = model_verdict(applied("0.17.1").package_dir, phi4mm)
    assert code == 1 and "not a target (its language model, LlamaModel (self.model), has no" in verdict
    assert "get_language_model().model.embed_tokens" in verdict, verdict


def test_status_judges_a_multimodal_checkpoint_and_the_language_model_it_names(release, applied, tmp_path):
    """LLaVA-NeXT leaves its language model to the checkpoint: a Mixtral one is a target once ``apply`` patched
    the wrapper, Mixtral's file and the gate; a PLaMo-2 one never is (its decoder is refused); by name alone, the
    verdict asks for the checkpoint."""
    mixtral = checkpoint(
        tmp_path / "llava-mixtral",
        "LlavaNextForConditionalGeneration",
        {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral"},
        model_type="llava_next",
    )
    plamo = checkpoint(
        tmp_path / "llava-plamo",
        "LlavaNextForConditionalGeneration",
        {"architectures": ["Plamo2ForCausalLM"], "model_type": "plamo2"},
        model_type="llava_next",
    )
    qwen2_vl = checkpoint(tmp_path / "qwen2-vl", "Qwen2VLForConditionalGeneration", {"model_type": "qwen2_vl_text"})
    code, verdict = model_verdict(release("0.17.1"), mixtral)
    assert code == 1 and "llava_next.py is unpatched" in verdict and "mixtral.py is unpatched" in verdict, verdict
    package_dir = applied("0.17.1").package_dir
    for ready in (mixtral, qwen2_vl):
        code, verdict = model_verdict(package_dir, ready)
        assert code == 0 and "a target on this install for eagle3, extract_hidden_states" in verdict, verdict
    assert "MixtralForCausalLM" in model_verdict(package_dir, mixtral)[1]
    code, verdict = model_verdict(package_dir, plamo)
    assert code == 1 and "plamo2.py is unsupported" in verdict, verdict
    code, verdict = model_verdict(package_dir, "LlavaNextForConditionalGeneration")
    assert code == 1 and "give the checkpoint's directory" in verdict, verdict
