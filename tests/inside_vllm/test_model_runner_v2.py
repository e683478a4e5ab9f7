"""Model runner V2's own EAGLE-3 wiring, run on the decoders ``apply`` patched in this tree (0.30.0 on).

A GPU user gets model runner V2 by default from 0.29.0, and it is the only GPU runner from 0.34.0; vLLM's CPU
platform runs V1, so no engine here runs V2.  This runs V2's own helper instead: the module the outer test
(``tests/test_model_runner_v2.py``) found calling ``set_aux_hidden_state_layers`` in the tree (named in
``VLLM_EAGLE3_PATCH_V2_RUNNER``) takes a patched causal LM holding its decoder over in-place stand-in layers
(``in_place.py``), checks it with ``supports_eagle3``, reads the ids from a drafter config as it reads them (or
asks the model's default getter) and hands them over; the decoder's ``forward`` must then return
``(hidden_states, [state, ...])`` with the streams entering those layers, as V2 unpacks it.
"""

from __future__ import annotations

import importlib
import json
import os
import types
from pathlib import Path
from typing import Callable

import pytest
import torch
from in_place import IDS, NUM_LAYERS, one_stage, run_decoder
from torch import nn

DECODERS = json.loads(Path(os.environ["VLLM_EAGLE3_PATCH_DECODERS"]).read_text())
V2_RUNNER = os.environ["VLLM_EAGLE3_PATCH_V2_RUNNER"]


def drafter_config(ids: tuple[int, ...] | None) -> types.SimpleNamespace:
    """A speculative config as V2's helper reads it: the drafter's ``hf_config``, with top-level ids or none."""
    hf_config = types.SimpleNamespace(**({"eagle_aux_hidden_state_layer_ids": list(ids)} if ids else {}))
    return types.SimpleNamespace(method="eagle3", draft_model_config=types.SimpleNamespace(hf_config=hf_config))


def bare(cls: type) -> nn.Module:
    instance = object.__new__(cls)
    nn.Module.__init__(instance)
    return instance


def wired_by_v2(decoder: dict, ids: tuple[int, ...] | None) -> tuple[Callable[[nn.Module], None], list, nn.Module]:
    """A ``wire`` for ``run_decoder`` that hands V2's helper the causal LM holding the decoder, to set its ids; what
    V2 set; and the causal LM."""
    module = importlib.import_module(decoder["module"])
    causal_lm = bare(getattr(module, decoder["architectures"][0]))
    v2 = importlib.import_module(V2_RUNNER)
    set_by_v2: list[tuple[int, ...]] = []

    def wire(model: nn.Module) -> None:
        model.aux_hidden_state_layers = ()
        *holders, attribute = decoder["decoder"].removeprefix("self.").split(".")  # ChatGLM: transformer.encoder
        holder = causal_lm
        for name in holders:
            setattr(holder, name, nn.Module())
            holder = getattr(holder, name)
        setattr(holder, attribute, model)
        with one_stage(module, v2, importlib.import_module(type(model).forward.__module__)):
            v2.set_eagle3_aux_hidden_state_layers(causal_lm, drafter_config(ids))
        set_by_v2.append(tuple(model.aux_hidden_state_layers))

    return wire, set_by_v2, causal_lm


def imported(decoder: dict) -> None:
    try:
        importlib.import_module(decoder["module"])
    except (ImportError, AssertionError, RuntimeError) as error:  # a module of another platform (CUDA asserted)
        pytest.skip(f"{decoder['module']} does not import in this interpreter: {type(error).__name__}: {error}")


IDS_OF_CASES = [f"{d['module']}:{d['model']}" for d in DECODERS]
"""One per decoder class, as the outer suite names them (``helpers.inner_suite.case_id``)."""


@pytest.mark.parametrize("decoder", DECODERS, ids=IDS_OF_CASES)
def test_v2_hands_the_drafters_ids_to_the_patched_decoder(decoder: dict) -> None:
    imported(decoder)
    wire, set_by_v2, _ = wired_by_v2(decoder, IDS)
    captured = run_decoder(decoder["module"], decoder["model"], (), wire)
    assert set_by_v2 == [IDS], f"V2 set {set_by_v2}, the drafter asked for {IDS}"
    expected = [captured.entering[i] if i < NUM_LAYERS else captured.leaving for i in IDS]
    assert len(captured.states) == len(IDS), f"forward returned {len(captured.states)} aux states for ids {IDS}"
    wrong = [i for i, got, want in zip(IDS, captured.states, expected) if not torch.equal(got, want)]
    assert not wrong, f"ids {wrong} are not the stream entering those layers"


@pytest.mark.parametrize("decoder", DECODERS, ids=IDS_OF_CASES)
def test_v2_asks_the_patched_getter_without_drafter_ids(decoder: dict) -> None:
    imported(decoder)
    wire, set_by_v2, causal_lm = wired_by_v2(decoder, None)
    captured = run_decoder(decoder["module"], decoder["model"], (), wire)
    (ids,) = set_by_v2
    getter = causal_lm.get_eagle3_default_aux_hidden_state_layers
    assert ids == tuple(getter()) and len(set(ids)) == 3 and all(0 <= i <= NUM_LAYERS for i in ids), ids
    assert len(captured.states) == 3
