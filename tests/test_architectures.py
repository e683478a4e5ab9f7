"""Every text-generation architecture a release registers gets a verdict, judged as its runner judges it:
the class the registry names, its bases resolved through the real wheels' own imports."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest
from helpers.bytes_on_disk import tree_digest
from helpers.cli import run_on as cli
from helpers.selection import release_param

from vllm_eagle3_patch.architecture_verdicts import VERDICTS
from vllm_eagle3_patch.discovery import model_types


def verdicts(package_dir, kind: str = "text") -> dict[str, dict]:
    """``status --architectures --json``'s verdicts of one registry (``text`` or ``multimodal``)."""
    completed = cli(package_dir, "status", "--architectures", "--json")
    assert completed.returncode == 0, completed.stderr
    return {v["architecture"]: v for v in json.loads(completed.stdout)["architectures"] if v["kind"] == kind}


@pytest.mark.parametrize(
    ("version", "registered", "runner"), [("0.17.1", 130, 31), ("0.21.0", 145, 43), ("0.33.0", 124, 53)]
)
def test_every_registered_architecture_is_native_patchable_or_refused_with_a_reason(
    release, version, registered, runner
):
    """The classes the runner accepts natively, counted independently from the wheels (43 and 53 on 0.21.0 and
    0.33.0): ``native`` where the gate admits them too, else ``gated`` (``tests/test_gate_verdicts.py``)."""
    found = verdicts(release(version))
    assert len(found) == registered
    assert all(v["verdict"] in VERDICTS and v["reason"] for v in found.values())
    assert sum(v["verdict"] in ("native", "gated") for v in found.values()) == runner


def test_inheritance_across_files_and_the_families(release):
    found = verdicts(release("0.17.1"))
    assert found["LlamaForCausalLM"]["verdict"] == "native"
    assert found["Phi3ForCausalLM"]["verdict"] == "gated"  # Phi3ForCausalLM(LlamaForCausalLM); 'phi3' not listed
    # found by rule: the causal LM builds MixtralModel, whose forward has the usual loop
    assert found["MixtralForCausalLM"]["verdict"] == "patchable", found["MixtralForCausalLM"]
    assert found["FlexOlmoForCausalLM"]["family"] == "OlmoeForCausalLM"  # a subclass in another file
    for architecture in ("DeepseekV3ForCausalLM", "GlmMoeDsaForCausalLM", "Gemma3ForCausalLM", "Qwen3NextForCausalLM"):
        assert found[architecture]["verdict"] == "patchable", found[architecture]


@pytest.mark.parametrize("version", ["0.17.1", "0.21.0", "0.33.0", "0.34.0"])
def test_most_registered_architectures_are_eagle3_targets_and_the_others_say_why(release, version):
    """Native or patchable by rule, nine in ten, each other one refused with what was not recognised."""
    found = verdicts(release(version))
    targets = [a for a, v in found.items() if v["verdict"] in ("native", "patchable", "gated")]
    assert len(targets) >= 0.9 * len(found), f"{len(targets)} of {len(found)}"
    examples = ("Qwen2MoeForCausalLM", "OlmoeForCausalLM", "Exaone4ForCausalLM", "Glm4MoeLiteForCausalLM")
    registered = [a for a in examples if a in found]  # 0.34.0 serves OLMoE through its transformers backend
    assert len(registered) >= 3, registered
    for architecture in registered:
        assert found[architecture]["verdict"] in ("native", "patchable"), found[architecture]
    refused = [v for v in found.values() if v["verdict"] == "refused"]
    assert all(".py" in v["reason"] and len(v["reason"]) > 60 for v in refused), refused  # the file, and why


def test_shapes_beyond_the_usual_loop(release):
    """Layers returning one tensor (OLMo 2, Granite), loops without stages (Bamba), layers adding their own
    residual (StableLM, EXAONE-4), a model class given as a parameter's default (InternLM2, ChatGLM), and the
    embedding kept where vLLM's proposer would not look (GPT-2's ``self.transformer.wte``, InternLM2's
    ``tok_embeddings``, OPT's ``model.decoder.embed_tokens``, Mamba's ``backbone.embeddings``)."""
    found = verdicts(release("0.17.1"))
    patchable = (
        "Olmo2ForCausalLM",
        "GraniteForCausalLM",
        "BambaForCausalLM",
        "Exaone4ForCausalLM",
        "StableLmForCausalLM",
        "GPT2LMHeadModel",
        "InternLM2ForCausalLM",
        "OPTForCausalLM",
        "MambaForCausalLM",
        "ChatGLMModel",
        "BailingMoeForCausalLM",
    )
    for architecture in patchable:
        assert found[architecture]["verdict"] == "patchable", found[architecture]


def test_apply_turns_the_patchable_into_patched(release):
    package_dir = release("0.17.1")
    before = verdicts(package_dir)
    assert cli(package_dir, "apply", "-q").returncode == 0
    after = verdicts(package_dir)
    patchable = {a for a, v in before.items() if v["verdict"] in ("patchable", "gated")}
    assert patchable and {a for a, v in after.items() if v["verdict"] == "patched"} == patchable


def answered_by_properties(package_dir: Path) -> dict[tuple[str, str], set[str]]:
    """(file name, class name) -> the attributes a property this tool added answers (``model``, ``embed_tokens``)."""
    answered: dict[tuple[str, str], set[str]] = {}
    for path in (package_dir / "model_executor" / "models").rglob("*.py"):
        text = path.read_text()
        if "vllm-eagle3-patch" not in text:
            continue
        lines = text.splitlines()
        for cls in ast.parse(text).body:
            for node in cls.body if isinstance(cls, ast.ClassDef) else ():
                added = isinstance(node, ast.FunctionDef) and "vllm-eagle3-patch" in lines[node.lineno - 1]
                if added and any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                    answered.setdefault((path.name, cls.name), set()).add(node.name)
    return answered


def assigned_on_self(cls: ast.ClassDef) -> set[str]:
    targets = [t for node in ast.walk(cls) if isinstance(node, ast.Assign) for t in node.targets]
    return {
        t.attr
        for t in targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


@pytest.mark.parametrize("version", [release_param(v, v != "0.21.0") for v in ("0.17.1", "0.21.0", "0.33.0")])
def test_no_subclass_sets_what_a_read_only_property_answers(release, version):
    """The read-only ``model`` / ``embed_tokens`` shown to vLLM's proposer would break a subclass that assigns
    the same attribute: no class of the release that inherits a patched class does, in any file, however
    far down (bases followed by name, which can only find more), and no patched class does itself (a model
    answering ``model`` with itself, Molmo's)."""
    package_dir = release(version)
    assert cli(package_dir, "apply", "-q").returncode == 0
    in_files = answered_by_properties(package_dir)
    answered: dict[str, set[str]] = {}
    for (_, name), attributes in in_files.items():
        answered.setdefault(name, set()).update(attributes)
    assert {"GPT2LMHeadModel", "GPT2Model", "BailingMoeModel", "OPTModel"} <= set(answered), answered
    assert {"AriaTextModel", "MolmoModel"} <= {name for name, attributes in answered.items() if "model" in attributes}
    classes: dict[str, list[tuple[str, set[str], set[str]]]] = {}
    for path in package_dir.rglob("*.py"):
        if ".vllm-eagle3-patch" in path.parts:
            continue
        for cls in (node for node in ast.walk(ast.parse(path.read_bytes())) if isinstance(node, ast.ClassDef)):
            bases = {getattr(base, "id", getattr(base, "attr", "")) for base in cls.bases}
            classes.setdefault(cls.name, []).append((path.name, bases, assigned_on_self(cls)))

    def properties_above(name: str) -> set[str]:
        """What read-only properties answer on ``name`` or any class it inherits from (names may repeat
        across files, so the walk keeps the names it has seen)."""
        seen, waiting, above = {name}, [name], set()
        while waiting:
            current = waiting.pop()
            above |= answered.get(current, set())
            for _, bases, _ in classes.get(current, ()):
                waiting += [base for base in bases - seen]
                seen |= bases
        return above

    clashes = [
        f"{file}: {name} sets self.{attribute}"
        for name, definitions in classes.items()
        for file, bases, assigned in definitions
        for attribute in assigned & set().union(in_files.get((file, name), set()), *map(properties_above, bases))
    ]
    assert clashes == []


def test_a_half_native_causal_lm_is_patchable_not_native(release):
    """Qwen3-Next on 0.21.0: its decoder collects, its causal LM lacks the protocol the runner checks."""
    assert verdicts(release("0.21.0"))["Qwen3NextForCausalLM"]["verdict"] == "patchable"


def test_a_platform_package_is_followed_to_the_class_it_exports(release):
    """0.33.0 registers ``vllm.models.deepseek_v32``, a package importing the class per platform."""
    found = verdicts(release("0.33.0"))
    assert found["DeepseekV32ForCausalLM"]["verdict"] == "native", found["DeepseekV32ForCausalLM"]


def changed_files(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {path for path in set(before) | set(after) if before.get(path) != after.get(path)}


def test_apply_only_keeps_to_the_named_architectures_then_a_plain_apply_adds_the_rest(release):
    package_dir = release("0.17.1")
    pristine = tree_digest(package_dir)
    only = cli(package_dir, "apply", "--only", "MixtralForCausalLM", "OlmoeForCausalLM", "--json")
    assert only.returncode == 0, only.stderr
    written = {p for p in changed_files(pristine, tree_digest(package_dir)) if not p.startswith(".vllm-eagle3-patch")}
    models = "model_executor/models"
    assert written == {f"{models}/mixtral.py", f"{models}/olmoe.py", "config/speculative.py", "v1/spec_decode/eagle.py"}
    found = verdicts(package_dir)
    assert found["MixtralForCausalLM"]["verdict"] == found["OlmoeForCausalLM"]["verdict"] == "patched"
    assert found["FlexOlmoForCausalLM"]["verdict"] == "patched"  # a subclass of OLMoE's causal LM: the same file
    assert found["DeepseekV3ForCausalLM"]["verdict"] == found["Gemma2ForCausalLM"]["verdict"] == "patchable"
    gate = (package_dir / "config/speculative.py").read_text()
    assert '"mixtral"' in gate and '"olmoe"' in gate and '"gemma2"' not in gate
    everything = cli(package_dir, "apply", "-q")
    assert everything.returncode == 0, everything.stderr
    found = verdicts(package_dir)
    assert found["DeepseekV3ForCausalLM"]["verdict"] == found["OlmoeForCausalLM"]["verdict"] == "patched"
    assert (
        '"olmoe"' in (package_dir / "config/speculative.py").read_text()
    )  # the gate follows the files patched with it
    assert cli(package_dir, "revert", "-q").returncode == 0
    assert tree_digest(package_dir) == pristine


def test_apply_only_an_unknown_architecture_is_refused_and_nothing_changes(release):
    package_dir = release("0.17.1")
    pristine = tree_digest(package_dir.parent)
    refused = cli(package_dir, "apply", "--only", "NoSuchForCausalLM")
    assert refused.returncode != 0
    assert "NoSuchForCausalLM: this vLLM registers no such architecture" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert tree_digest(package_dir.parent) == pristine


TRANSFORMERS_TYPES = """
import json
from transformers.models.auto import modeling_auto
types = {}
for name, mapping in vars(modeling_auto).items():
    if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(mapping, dict):
        for model_type, classes in mapping.items():
            for cls in classes if isinstance(classes, (list, tuple)) else (classes,):
                types.setdefault(cls, []).append(model_type)
print(json.dumps(types))
"""


@pytest.mark.parametrize("version", ["0.17.1", "0.21.0", "0.33.0"])
def test_the_gate_types_of_every_architecture_agree_with_transformers(release, modern_python, version):
    """A bare architecture name is judged by each type its checkpoints name (the gate admits a checkpoint when a
    listed type is a substring of its ``model_type``, so ``hunyuan_v1`` would pass for ``hunyuan_v1_moe``, which the
    gate refuses): for every architecture transformers knows, each of its types must be among ours, exactly."""
    known = json.loads(
        subprocess.run([modern_python, "-c", TRANSFORMERS_TYPES], capture_output=True, text=True, check=True).stdout
    )
    found = verdicts(release(version))
    missed = {
        architecture: (ours, real)
        for architecture, verdict in found.items()
        for ours in [model_types(architecture, verdict["module"])]
        for real in [known.get(architecture, [])]
        if any(model_type not in ours for model_type in real)
    }
    assert missed == {}


def test_status_says_which_patched_architectures_cross_pipeline_ranks(release):
    """From 0.30.0 (0.33.0 here) the patched decoders of the usual staged shape carry their aux states across
    ranks, and those that cannot say so; before (0.17.1) none does."""
    newest, older = release("0.33.0"), release("0.17.1")
    for package_dir in (newest, older):
        assert cli(package_dir, "apply", "-q").returncode == 0
    found = verdicts(newest)
    assert found["MixtralForCausalLM"]["over_pipeline_ranks"] is True
    assert found["GPT2LMHeadModel"]["over_pipeline_ranks"] is True  # its decoder is self.transformer
    assert found["DbrxForCausalLM"]["over_pipeline_ranks"] is False  # DbrxModel keeps no self.config
    assert found["LlamaForCausalLM"]["over_pipeline_ranks"] is None  # upstream's own
    patched_here = [v for v in verdicts(older).values() if v["verdict"] == "patched" and v["family"] is not None]
    assert patched_here and {v["over_pipeline_ranks"] for v in patched_here} == {False}  # (gate-only: upstream's)
