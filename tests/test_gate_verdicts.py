"""Issue 29, items 1 to 3: a verdict is a promise that vLLM will accept the target, so each one is checked against
the gate as the release's own code tests it (its whitelist, read here apart from the tool, matched by substring
as ``SpeculativeConfig`` matches ``hf_text_config.model_type``), on a real 0.17.1 tree, through the real command."""

from __future__ import annotations

import ast
import json

from helpers.cli import run_on as cli

from vllm_eagle3_patch.discovery import model_types

GATED_ON_0_17_1 = {
    "ApertusForCausalLM",
    "AquilaModel",
    "AquilaForCausalLM",
    "CwmForCausalLM",
    "Ernie4_5ForCausalLM",
    "GlmForCausalLM",
    "GritLM",
    "HunYuanMoEV1ForCausalLM",
    "InternLMForCausalLM",
    "InternLM3ForCausalLM",
    "MistralForCausalLM",
    "MiMoForCausalLM",
    "MiMoV2FlashForCausalLM",
    "Phi3ForCausalLM",
    "TeleChatForCausalLM",
    "TeleChat2ForCausalLM",
    "TeleFLMForCausalLM",
    "XverseForCausalLM",
}
"""Their classes implement EAGLE-3 and the runner accepts them; 0.17.1's whitelist does not (HunYuan's dense
checkpoints name ``hunyuan_v1_dense``, which it lists)."""


def vllm_admits(package_dir, model_type: str) -> bool:
    """What 0.17.1's ``SpeculativeConfig`` does: any whitelist entry a substring of the model type."""
    tree = ast.parse((package_dir / "config" / "speculative.py").read_text())
    (listed,) = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "aux_hidden_states_supported" for t in node.targets)
    ]
    return any(entry.value in model_type for entry in listed.elts)


def architectures(package_dir) -> dict[str, dict]:
    completed = cli(package_dir, "status", "--architectures", "--json")
    assert completed.returncode == 0, completed.stderr
    return {v["architecture"]: v for v in json.loads(completed.stdout)["architectures"]}


def gate_row(package_dir) -> dict:
    completed = cli(package_dir, "status", "--json")
    (row,) = [t for t in json.loads(completed.stdout)["targets"] if t["file"] == "config/speculative.py"]
    return row


def passes(package_dir, *args: str) -> bool:
    return cli(package_dir, "status", "--check", *args, "-q").returncode == 0


def test_every_verdict_on_0_17_1_is_what_its_gate_then_does(release):
    """Native means the release's gate admits every model type the architecture's checkpoints name; gated means it
    refuses one, and ``apply`` makes it patched, which the patched whitelist then admits."""
    package_dir = release("0.17.1")
    before = architectures(package_dir)
    for name, verdict in before.items():
        if verdict["kind"] == "multimodal":
            continue  # the gate checks the text config's type: the test below
        admitted = all(vllm_admits(package_dir, t) for t in model_types(name, verdict["module"]))
        if verdict["verdict"] == "native":
            assert admitted, verdict
        if verdict["verdict"] == "gated":
            assert not admitted and "`apply`" in verdict["reason"], verdict
    gated_text = {name for name, v in before.items() if v["verdict"] == "gated" and v["kind"] == "text"}
    assert gated_text == GATED_ON_0_17_1
    assert not passes(package_dir, "--model", "MistralForCausalLM")
    assert cli(package_dir, "apply", "-q").returncode == 0
    after = architectures(package_dir)
    for name in GATED_ON_0_17_1:
        assert after[name]["verdict"] == "patched", after[name]
        assert all(vllm_admits(package_dir, t) for t in model_types(name, after[name]["module"])), name
    assert after["LlamaForCausalLM"]["verdict"] == "native"  # admitted by the release's own whitelist


def test_a_partial_apply_never_takes_away_what_an_earlier_apply_gave(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply", "-q").returncode == 0
    assert passes(package_dir, "--model", "MistralForCausalLM")
    assert cli(package_dir, "apply", "-q", "--only", "MixtralForCausalLM").returncode == 0
    assert vllm_admits(package_dir, "mistral") and vllm_admits(package_dir, "xverse")
    assert passes(package_dir, "--model", "MistralForCausalLM") and passes(package_dir)
    assert gate_row(package_dir)["state"] == "patched"


def test_status_sees_a_gate_patched_for_fewer_types_than_the_install_needs(release):
    """After ``apply --only MixtralForCausalLM`` the gate admits Mixtral's types only: not ``patched`` for the
    install, and Mistral, whose class is native, is gated until a plain ``apply``."""
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply", "-q", "--only", "MixtralForCausalLM").returncode == 0
    assert vllm_admits(package_dir, "mixtral") and not vllm_admits(package_dir, "mistral")
    row = gate_row(package_dir)
    assert row["state"] == "unpatched" and "`apply`" in row["reason"], row
    assert architectures(package_dir)["MistralForCausalLM"]["verdict"] == "gated"
    assert passes(package_dir, "--model", "MixtralForCausalLM") and not passes(
        package_dir, "--model", "MistralForCausalLM"
    )
    assert cli(package_dir, "apply", "-q").returncode == 0
    assert gate_row(package_dir)["state"] == "patched" and vllm_admits(package_dir, "mistral")
    assert passes(package_dir, "--model", "MistralForCausalLM")


def test_a_bare_name_is_judged_by_the_types_its_checkpoints_name(release, tmp_path):
    """HunYuan's dense checkpoints name ``hunyuan_v1_dense`` (0.17.1's whitelist lists it), its MoE ones
    ``hunyuan_v1_moe`` (refused): by name and by checkpoint, the same verdict, the one the gate gives."""
    package_dir = release("0.17.1")
    for architecture, model_type in (
        ("HunYuanDenseV1ForCausalLM", "hunyuan_v1_dense"),
        ("HunYuanMoEV1ForCausalLM", "hunyuan_v1_moe"),
    ):
        checkpoint = tmp_path / model_type
        checkpoint.mkdir()
        (checkpoint / "config.json").write_text(json.dumps({"architectures": [architecture], "model_type": model_type}))
        admitted = vllm_admits(package_dir, model_type)
        assert passes(package_dir, "--model", architecture) is admitted, architecture
        assert passes(package_dir, "--model", str(checkpoint)) is admitted, checkpoint
    assert vllm_admits(package_dir, "hunyuan_v1_dense") and not vllm_admits(package_dir, "hunyuan_v1_moe")


def test_a_multimodal_class_is_gated_by_its_checkpoints_text_model_type(release, tmp_path):
    """The gate tests ``hf_text_config.model_type``: for LLaVA, the text config's (``llama`` passes 0.17.1's
    whitelist, ``mistral`` does not), never ``llava``. By name the verdict says the checkpoint decides; with a
    checkpoint, the gate's own answer."""
    package_dir = release("0.17.1")
    llava = architectures(package_dir)["LlavaForConditionalGeneration"]
    assert llava["verdict"] == "gated" and "checks the model type of its checkpoint's text config" in llava["reason"]
    checkpoints = {}
    for text_type in ("llama", "mistral"):
        directory = tmp_path / text_type
        directory.mkdir()
        config = {
            "architectures": ["LlavaForConditionalGeneration"],
            "model_type": "llava",
            "text_config": {"model_type": text_type, "num_hidden_layers": 32},
        }
        (directory / "config.json").write_text(json.dumps(config))
        checkpoints[text_type] = str(directory)
    assert vllm_admits(package_dir, "llama") and not vllm_admits(package_dir, "mistral")
    assert passes(package_dir, "--model", checkpoints["llama"])
    assert not passes(package_dir, "--model", checkpoints["mistral"])
    assert cli(package_dir, "apply", "-q").returncode == 0
    assert vllm_admits(package_dir, "mistral") and passes(package_dir, "--model", checkpoints["mistral"])
    assert architectures(package_dir)["LlavaForConditionalGeneration"]["verdict"] == "patched"
