"""Every decoder that ``apply`` patched or exposed in this tree hands the drafter the stream as it was, under
layers that write into their inputs as vLLM's fused kernels do (``in_place.py``, the check ``verify`` runs).

The decoders to check come from the outer test (``tests/test_every_target.py``), which reads them from the
tool's plan of this tree: ``VLLM_EAGLE3_PATCH_DECODERS`` names a JSON file of ``{"module", "model",
"architectures"}``.  Id ``k`` must be the stream entering layer ``k``, id ``n`` the stream leaving the last
layer, before the final norm: what each stand-in layer recorded as it read its inputs, before it wrote into
them.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
from in_place import check_stream

DECODERS = json.loads(Path(os.environ["VLLM_EAGLE3_PATCH_DECODERS"]).read_text())


@pytest.mark.parametrize("decoder", DECODERS, ids=[f"{d['module']}:{d['model']}" for d in DECODERS])
def test_the_drafter_gets_the_stream_as_it_was(decoder: dict) -> None:
    try:
        importlib.import_module(decoder["module"])
    except (ImportError, AssertionError, RuntimeError) as error:  # a module of another platform (CUDA asserted)
        pytest.skip(f"{decoder['module']} does not import in this interpreter: {type(error).__name__}: {error}")
    check_stream(decoder["module"], decoder["model"])
