"""Time ``DeepseekV2Model.forward`` with nothing captured, inside the CPU interpreter.

Run by ``benchmarks/run.py`` as ``python forward_timing.py LAYERS ITERATIONS SAMPLES`` with a vLLM
tree (patched or not) first on ``PYTHONPATH``.  It needs torch and vLLM's requirements, not
this tool, so it imports nothing from the repository.

The model is built without its real ``__init__`` (which wants a GPU, a config and weights), and
its decoder layers are stand-ins that do no work, so what is timed is the Python of ``forward``
itself: the loop over layers and, once patched, the membership test added to every iteration.

On a shared machine the speed of the CPU itself drifts by a factor of two between processes
(another VM, the SMT sibling), far more than the effect measured.  So every sample of ``forward``
is paired with a sample of a reference loop that is the same in every tree (the unpatched
decoder loop over the same stand-ins), and the ratio of the two is what compares across
processes.  It prints one JSON object on stdout:
``{"patched", "module", "forward": [ns...], "reference": [ns...], "ratio": [...]}``, one entry per sample.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import inspect
import json
import sys
import time
import types
from itertools import islice
from typing import Any, Callable


def build_model(deepseek: types.ModuleType, num_layers: int) -> Any:
    """A ``DeepseekV2Model`` on one pipeline stage holding ``num_layers`` layers that do no work."""
    from torch import nn

    model = object.__new__(deepseek.DeepseekV2Model)
    nn.Module.__init__(model)
    model.layers = [lambda positions, h, r, *extra: (h, r) for _ in range(num_layers)]
    model.start_layer, model.end_layer = 0, num_layers
    model.norm = lambda h, r: (h, r)
    model.config = types.SimpleNamespace()  # no llama_4_scaling
    model.aux_hidden_state_layers = ()  # nothing captured (harmless on the unpatched class)
    group = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)
    deepseek.get_pp_group = lambda: group  # first and last rank at once
    return model


def forward_call(model: Any) -> Callable[[], Any]:
    """One forward on a one-element tensor, so tensor work is nil and the loop overhead dominates."""
    import torch

    positions = torch.zeros(1, dtype=torch.long)
    embeds = torch.zeros(1, 1)
    forward = model.forward
    output = forward(None, positions, None, inputs_embeds=embeds)
    assert output is embeds, f"forward returned {type(output).__name__}, expected the input tensor itself"
    return lambda: forward(None, positions, None, inputs_embeds=embeds)


def reference_call(model: Any) -> Callable[[], Any]:
    """The unpatched decoder loop alone, over the same layers: identical code in every tree."""

    def loop(layers: list[Any], start: int, end: int, hidden_states: Any, residual: Any) -> Any:
        for layer in islice(layers, start, end):
            hidden_states, residual = layer(None, hidden_states, residual, None)
        return hidden_states

    layers, start, end = model.layers, model.start_layer, model.end_layer
    return lambda: loop(layers, start, end, 0, None)


def time_once(call: Callable[[], Any], iterations: int) -> float:
    """Nanoseconds per call, averaged over ``iterations`` calls."""
    start = time.perf_counter_ns()
    for _ in range(iterations):
        call()
    return (time.perf_counter_ns() - start) / iterations


def time_pairs(
    forward: Callable[[], Any], reference: Callable[[], Any], iterations: int, samples: int
) -> dict[str, list[float]]:
    """``samples`` back-to-back pairs (forward, reference); gc off so that a collection does not
    land in one variant's samples and not the other's."""
    time_once(forward, iterations)  # warm up
    time_once(reference, iterations)
    timings: dict[str, list[float]] = {"forward": [], "reference": [], "ratio": []}
    gc.disable()
    try:
        for _ in range(samples):
            timings["forward"].append(time_once(forward, iterations))
            timings["reference"].append(time_once(reference, iterations))
            timings["ratio"].append(timings["forward"][-1] / timings["reference"][-1])
    finally:
        gc.enable()
    return timings


def main(argv: list[str]) -> dict[str, Any]:
    num_layers, iterations, samples = (int(value) for value in argv)
    deepseek = importlib.import_module("vllm.model_executor.models.deepseek_v2")
    source = inspect.getsource(deepseek.DeepseekV2Model.forward)
    model = build_model(deepseek, num_layers)
    timings = time_pairs(forward_call(model), reference_call(model), iterations, samples)
    return {"patched": "aux_hidden_state_layers" in source, "module": deepseek.__file__, **timings}


if __name__ == "__main__":
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs on import; stdout is for the result
        result = main(sys.argv[1:])
    print(json.dumps(result))
