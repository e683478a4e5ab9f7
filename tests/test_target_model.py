"""``status --check --model``: a deployment's own model judged as vLLM's runner and gate will judge it,
on real release trees, whatever else on the install is unpatched."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers.cli import run_cli
from helpers.cli import run_on as cli
from helpers.selection import release_param

from vllm_eagle3_patch.architecture_verdicts import architecture_verdicts
from vllm_eagle3_patch.drafters.target_model import target_model_of
from vllm_eagle3_patch.install.locate import from_package_dir
from vllm_eagle3_patch.plan import make_plan
from vllm_eagle3_patch.render.words import target_verdict


def check(package_dir, model: str) -> tuple[int, dict]:
    completed = cli(package_dir, "status", "--check", "--model", model, "--json")
    return completed.returncode, json.loads(completed.stdout)["model"]


def test_a_native_deepseek_passes_while_other_families_are_unpatched(release):
    """0.18.x: DeepSeek is native; a CI gate for a DeepSeek deployment must not fail for Gemma's file."""
    package_dir = release("0.18.0")
    assert cli(package_dir, "status", "--check").returncode == 1  # the install as a whole has work left
    for architecture in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        code, model = check(package_dir, architecture)
        assert code == 0 and model["eagle3_target"] and "native" in model["verdict"], model


def test_kimi_k25_waits_for_the_proposer_where_it_is_not_named_there(release):
    """0.15-0.17: the proposer's generic branch reads ``image_token_index``, which Kimi-K2.5's config lacks."""
    package_dir = release("0.17.1")
    code, model = check(package_dir, "KimiK25ForConditionalGeneration")
    assert code == 1 and "v1/spec_decode/eagle.py is unpatched" in model["verdict"], model


def test_glm5_needs_the_gate_that_upstream_left_it_out_of(release):
    """0.18-0.21's whitelist lists DeepSeek's types but not GLM-5's ``glm_moe_dsa``."""
    package_dir = release("0.18.0")
    code, model = check(package_dir, "GlmMoeDsaForCausalLM")
    assert code == 1 and "gate refuses model type 'glm_moe_dsa'" in model["verdict"], model
    assert cli(package_dir, "apply", "-q").returncode == 0
    assert check(package_dir, "GlmMoeDsaForCausalLM")[0] == 0


@pytest.mark.parametrize("version", ["0.17.1"])
def test_deepseek_before_and_after_apply_by_name_and_by_checkpoint(release, tmp_path, version):
    package_dir = release(version)
    checkpoint = tmp_path / "deepseek-v3"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(
        json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"})
    )
    for model in ("DeepseekV3ForCausalLM", str(checkpoint), "GlmMoeDsaForCausalLM"):
        code, verdict = check(package_dir, model)
        assert code == 1 and "deepseek_v2.py is unpatched" in verdict["verdict"], verdict
    assert cli(package_dir, "apply", "-q").returncode == 0
    for model in ("DeepseekV3ForCausalLM", str(checkpoint), "GlmMoeDsaForCausalLM"):
        code, verdict = check(package_dir, model)
        assert code == 0 and "patched" in verdict["verdict"], verdict


def test_qwen3_next_half_native_is_patched_into_a_target(release):
    """0.20-0.23: the decoder collects, but the causal LM lacks the protocol, so the runner refuses it."""
    package_dir = release("0.21.0")
    code, model = check(package_dir, "Qwen3NextForCausalLM")
    assert code == 1 and "qwen3_next.py is unpatched" in model["verdict"], model
    assert cli(package_dir, "apply", "-q").returncode == 0
    assert check(package_dir, "Qwen3NextForCausalLM")[0] == 0


def test_models_this_tool_does_not_know_are_said_so(release):
    package_dir = release("0.17.1")
    code, model = check(package_dir, "OuroForCausalLM")  # runs its layers once per step: no loop the rule follows
    assert code == 1 and model["module"] == "ouro" and "ouro.py is unsupported" in model["verdict"], model
    code, model = check(package_dir, "NoSuchForCausalLM")
    assert code == 1 and "not in this vLLM's model registry" in model["verdict"]


def test_any_registered_architecture_is_judged(release):
    """Found by rule (Mixtral), native by inheritance but gated (Phi-3), native and admitted (Llama), refused
    by the rule (Ouro): each judged as the runner and the gate will, before and after apply --only."""
    package_dir = release("0.17.1")
    code, llama = check(package_dir, "LlamaForCausalLM")
    assert code == 0 and "native" in llama["verdict"], llama
    code, mixtral = check(package_dir, "MixtralForCausalLM")
    assert code == 1 and "mixtral.py is unpatched" in mixtral["verdict"], mixtral
    code, phi3 = check(package_dir, "Phi3ForCausalLM")
    assert code == 1 and "gate refuses model type 'phi3'" in phi3["verdict"], phi3
    assert cli(package_dir, "apply", "-q", "--only", "MixtralForCausalLM").returncode == 0
    code, mixtral = check(package_dir, "MixtralForCausalLM")
    assert code == 0 and mixtral["eagle3_target"] and "patched" in mixtral["verdict"], mixtral
    assert check(package_dir, "OuroForCausalLM")[0] == 1
    assert check(package_dir, "Phi3ForCausalLM")[0] == 0  # the gate admits its family's type whatever --only says


def test_a_checkpoint_without_architectures_is_resolved_as_vllm_does(release, modern_python, tmp_path):
    """Issue 41.3: Qwen2-VL's ``save_pretrained`` writes no ``architectures``; vLLM maps its ``model_type`` through
    the transformers beside it (``MODEL_MAPPING_NAMES``: ``Qwen2VLModel``) and its registry's suffix rule
    (``Qwen2VLForConditionalGeneration``). ``status --model`` and ``doctor`` do the same; without a transformers
    that maps it (a bare tree), they say so in one line."""
    package_dir = release("0.34.0")
    checkpoint = tmp_path / "qwen2-vl"
    checkpoint.mkdir()
    text = {"model_type": "qwen2_vl_text", "num_hidden_layers": 28, "hidden_size": 1536, "vocab_size": 151936}
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "text_config": text}))
    bare = run_cli("--vllm-dir", str(package_dir), "status", "--model", str(checkpoint))
    assert bare.returncode == 1 and len(bare.stderr.strip().splitlines()) == 1
    assert "no architectures list" in bare.stderr and "'qwen2_vl'" in bare.stderr
    site = subprocess.run(
        [str(modern_python), "-c", "import transformers, pathlib; print(pathlib.Path(transformers.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (package_dir.parent / "transformers").symlink_to(site)
    resolved = run_cli("--vllm-dir", str(package_dir), "status", "--model", str(checkpoint))
    assert resolved.returncode == 0 and resolved.stdout.startswith("model: Qwen2VLForConditionalGeneration"), resolved
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 1536, "vocab_size": 151936})
    )
    doctor = run_cli(
        "--vllm-dir", str(package_dir), "--json", "doctor", "--drafter", str(drafter), "--target", str(checkpoint)
    )
    assert "Qwen2VLForConditionalGeneration" in doctor.stdout, doctor.stdout + doctor.stderr


@pytest.mark.parametrize("version", [release_param("0.17.1", True), release_param("0.34.0", False)])
def test_status_model_and_architectures_are_one_judge(release, version):
    """For every architecture the release registers, ``status --model`` serves exactly the methods
    ``status --architectures`` lists for it, before apply and after: one judge of what the runner and the gate
    let through (0.17.1: the gate's whitelist, multimodal classes judged by their language model's type)."""
    package_dir = release(version)
    for step in ("unpatched", "patched"):
        if step == "patched":
            assert cli(package_dir, "apply", "-q").returncode == 0
        plan = make_plan(from_package_dir(package_dir), states_only=True)
        verdicts = architecture_verdicts(plan)
        served = {v.architecture: v.methods for v in verdicts}
        assert any(served.values()) and not all(served.values()), served
        # a class whose checkpoint names its language model is a target only if that one is: by name, status
        # --model asks for the checkpoint rather than promise (its row says what it hands EAGLE-3 on to)
        by_checkpoint = {v.architecture for v in verdicts if chosen_by_checkpoint(plan, v.architecture)}
        judged = {v.architecture: target_model_of(plan, v.architecture, None) for v in verdicts}
        for architecture in by_checkpoint:
            assert not judged[architecture].serves and "give the checkpoint" in target_verdict(judged[architecture])
        differ = {
            a: (judged[a].serves, served[a]) for a in served if a not in by_checkpoint and judged[a].serves != served[a]
        }
        assert not differ, (step, differ)


def chosen_by_checkpoint(plan, architecture: str) -> bool:
    """The class (or the class a platform imports for it) runs the language model its checkpoint names."""
    wrappers = plan.discovery.wrappers
    variants = plan.discovery.per_platform.get(architecture, ())
    names = [architecture, *(v.wrapper for v in variants if v.wrapper)]
    return any(name in wrappers and wrappers[name].chosen_by_checkpoint for name in names)
