"""The decoders the tool warns about fail at aux id 0, and the others capture it (``native_ids.first_layer_trap``);
the ones it says never reach id n capture nothing there, and the others hand it over (``native_ids.uncapturable_ids``).

The outer test (``tests/test_methods.py``) names the decoders in ``VLLM_EAGLE3_PATCH_DECODERS``, each with
``"trap"``: the ``path:line`` the tool says fails at id 0, or null; ``"unreached"``: where it says id n is never
captured, or null.  Each decoder's real ``forward`` runs over
in-place stand-in layers (``in_place.run_decoder``) on the first pipeline rank, asked for id 0 and for id 1.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
from in_place import NUM_LAYERS, run_decoder

DECODERS = json.loads(Path(os.environ["VLLM_EAGLE3_PATCH_DECODERS"]).read_text())


@pytest.mark.parametrize("decoder", DECODERS, ids=[f"{d['module']}:{d['model']}" for d in DECODERS])
def test_id_0_fails_exactly_where_the_tool_says(decoder: dict) -> None:
    try:
        importlib.import_module(decoder["module"])
    except (ImportError, AssertionError, RuntimeError) as error:  # a module of another platform (CUDA asserted)
        pytest.skip(f"{decoder['module']} does not import in this interpreter: {type(error).__name__}: {error}")
    assert len(run_decoder(decoder["module"], decoder["model"], ids=(1,)).states) == 1  # it runs at all
    if decoder["trap"] is None:
        assert len(run_decoder(decoder["module"], decoder["model"], ids=(0,)).states) == 1
        return
    with pytest.raises(TypeError, match="NoneType"):
        run_decoder(decoder["module"], decoder["model"], ids=(0,))


@pytest.mark.parametrize("decoder", DECODERS, ids=[f"{d['module']}:{d['model']}" for d in DECODERS])
def test_id_n_is_missed_exactly_where_the_tool_says(decoder: dict) -> None:
    try:
        importlib.import_module(decoder["module"])
    except (ImportError, AssertionError, RuntimeError) as error:
        pytest.skip(f"{decoder['module']} does not import in this interpreter: {type(error).__name__}: {error}")
    captured = run_decoder(decoder["module"], decoder["model"], ids=(1, NUM_LAYERS)).states
    assert len(captured) == (1 if decoder["unreached"] else 2), decoder
