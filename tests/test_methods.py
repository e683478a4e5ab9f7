"""The speculative methods that read the target's hidden states (``eagle3/methods.py``), on the real wheels.

Each release's methods are what its speculative config names, checked against the release that added each (the
table's ``since``, an independent witness kept by hand); the gate checks them where it has a whitelist; a target
serves each of them once both checks pass (the engine proof of one: tests/engine/test_methods_engine.py).  And the
id vLLM's own decoders cannot capture: the tool's warning must name exactly the decoders that fail at id 0 when
their real ``forward`` runs (tests/inside_vllm/test_first_layer.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import environments, wheel_corpus
from helpers.cli import run_on
from helpers.inner_suite import case_id
from helpers.inner_suite import outcomes as suite_outcomes
from helpers.selection import release_param

from vllm_eagle3_patch.eagle3.class_chain import ChainReader
from vllm_eagle3_patch.eagle3.methods import METHODS, drafter_method, methods_in
from vllm_eagle3_patch.eagle3.native_ids import collecting_decoder, uncapturable_ids
from vllm_eagle3_patch.eagle3.release import Release

RELEASES = ("0.8.5", "0.10.1", "0.16.0", "0.17.1", "0.21.0", "0.22.0", "0.24.0", "0.29.0", "0.34.0")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3])


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_has_the_methods_added_by_then_and_its_gate_checks_them_while_it_has_one(version: str) -> None:
    release = Release(wheel_corpus.release_tree(version) / "vllm")
    found = {support.method.name: support.gated for support in release.methods}
    assert list(found) == [m.name for m in METHODS if _version(m.since) <= _version(version)]
    has_a_whitelist = not release.gate_admits("no-such-model-type")
    assert set(found.values()) == {has_a_whitelist}, found


@pytest.mark.unit
def test_a_method_the_gate_does_not_compare_is_not_gated() -> None:
    source = (
        'M = Literal["eagle3", "extract_hidden_states", "dflash"]\n'
        "def check(self):\n"
        '    if self.method in ("eagle3", "dflash") and not any(s in t for s in aux_hidden_states_supported):\n'
        '        raise ValueError(f"{self.method} is only supported for ...")\n'
    )
    assert [(s.method.name, s.gated) for s in methods_in(source)] == [
        ("eagle3", True),
        ("extract_hidden_states", False),
        ("dflash", True),
    ]


@pytest.mark.unit
@pytest.mark.parametrize(
    "config, method",
    [
        ({"architectures": ["LlamaForCausalLMEagle3"]}, "eagle3"),
        ({"architectures": ["DFlashDraftModel"], "dflash_config": {"target_layer_ids": [1, 5]}}, "dflash"),
        ({"architectures": ["Qwen3DSparkModel"], "dspark_target_layer_ids": [1, 5]}, "dspark"),
        ({"architectures": ["LlamaForCausalLM"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}}, "eagle3"),
    ],
)
def test_a_drafter_config_says_its_method(config: dict, method: str) -> None:
    assert drafter_method(config).name == method


def test_a_patched_target_serves_every_method_the_release_has(release) -> None:
    package_dir = release("0.17.1")
    before = json.loads(run_on(package_dir, "status", "--model", "MixtralForCausalLM", "--json").stdout)["model"]
    assert before["methods"] == [] and before["target"] is False and before["eagle3_target"] is False
    assert run_on(package_dir, "apply").returncode == 0
    after = json.loads(run_on(package_dir, "status", "--model", "MixtralForCausalLM", "--json").stdout)["model"]
    assert after["methods"] == ["eagle3", "extract_hidden_states"] and after["target"] and after["eagle3_target"]
    assert "a target on this install for eagle3, extract_hidden_states" in after["verdict"]
    rows = json.loads(run_on(package_dir, "status", "--architectures", "--json").stdout)["architectures"]
    served = {row["architecture"]: row["methods"] for row in rows}
    assert served["MixtralForCausalLM"] == ["eagle3", "extract_hidden_states"]
    assert all(
        (row["methods"] == ["eagle3", "extract_hidden_states"]) == (row["verdict"] in ("native", "patched"))
        for row in rows
    )


FIRST_LAYER = {
    "0.17.1": (
        lambda: environments.engine_python("2.10.0"),
        ("Qwen2ForCausalLM", "LlamaForCausalLM", "Qwen2VLForConditionalGeneration", "MixtralForCausalLM"),
    ),
    "0.33.0": (environments.modern_python, ("DeepseekV3ForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM")),
}
"""Per release: native decoders the tool warns about and ones it patches or vLLM fixed (the inner suite runs each);
CI runs 0.17.1, ``VLLM_EAGLE3_PATCH_RELEASES=all`` adds 0.33.0 (DeepSeek's own decoder)."""


@pytest.mark.parametrize("version", [release_param(v, v == "0.17.1") for v in FIRST_LAYER])
def test_the_first_layer_warning_names_exactly_the_decoders_that_fail_at_id_0(
    version: str, release, tmp_path: Path
) -> None:
    python, architectures = FIRST_LAYER[version]
    package_dir = release(version)
    assert run_on(package_dir, "apply").returncode == 0
    read = Release(package_dir).read
    registry = Release(package_dir).registry
    decoders: dict[str, dict] = {}
    traps: dict[str, object] = {}
    last: dict[str, object] = {}
    for architecture in architectures:
        chains = ChainReader(read)
        decoder = collecting_decoder(chains, *registry[architecture], registry)
        assert decoder is not None, architecture
        missed = uncapturable_ids(chains, read, *registry[architecture], registry)
        trap, unreached = missed.first_layer, missed.last_layer
        entry = {"module": f"vllm.{decoder.module}", "model": decoder.name, "trap": trap, "unreached": unreached}
        decoders[case_id(entry)], traps[architecture], last[architecture] = entry, trap, unreached
    warned = {key for key, entry in decoders.items() if entry["trap"]}
    assert warned and warned != set(decoders), decoders  # both kinds, or the test proves nothing
    unreached = {key for key, entry in decoders.items() if entry["unreached"]}
    assert unreached and unreached != set(decoders), decoders
    listed = tmp_path / "decoders.json"
    listed.write_text(json.dumps(list(decoders.values())))
    output, outcomes = suite_outcomes(python(), package_dir, listed, "test_first_layer.py")
    assert outcomes == {key: "passed" for key in decoders}, output

    for architecture in architectures:  # status --model warns where, and only where, the decoder misses an id
        model = json.loads(run_on(package_dir, "status", "--model", architecture, "--json").stdout)["model"]
        trap, unreached = traps[architecture], last[architecture]
        assert (model["id_0_fails_at"], model["id_n_fails_at"]) == (trap, unreached), architecture
        assert ("warning, not layer 0" in model["verdict"]) == bool(trap), model["verdict"]
        assert ("warning, not layer n" in model["verdict"]) == bool(unreached), model["verdict"]
    first = json.loads(run_on(package_dir, "status", "--model", architectures[0], "--json").stdout)["model"]
    assert (
        f"not layer 0: vLLM's decoder adds the residual, still None at the first layer ({traps[architectures[0]]})"
        in first["verdict"]
    )
