"""Time what the captures' copies cost: ``hidden_states.clone()`` of one ``[tokens, hidden]`` state, beside the
``hidden_states + residual`` that a capture inside the loop pays anyway (both make one new tensor).

A patched decoder copies a captured state only where it would otherwise keep a bare tensor a later layer
writes into: id 0 of a decoder whose layers hand the residual on (one copy a step, and only when id 0 is
asked for), every id of one whose layers take the stream alone (three a step with three ids).  Run by
``benchmarks/run.py`` as ``python capture_copy.py TOKENS HIDDEN SAMPLES`` in the CPU interpreter; it needs
torch only and prints one JSON object: ``{"tokens", "hidden", "bytes", "copy": [ns...], "add": [ns...]}``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable


def time_ns(call: Callable[[], Any], repeat: int = 20) -> float:
    start = time.perf_counter_ns()
    for _ in range(repeat):
        call()
    return (time.perf_counter_ns() - start) / repeat


def main(argv: list[str]) -> dict[str, Any]:
    import torch

    tokens, hidden, samples = (int(value) for value in argv)
    hidden_states = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    residual = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    copy, add = (lambda: hidden_states.clone()), (lambda: hidden_states + residual)
    time_ns(copy), time_ns(add)  # warm up the allocator
    timings: dict[str, list[float]] = {"copy": [], "add": []}
    for _ in range(samples):
        timings["copy"].append(time_ns(copy))
        timings["add"].append(time_ns(add))
    size = hidden_states.element_size() * hidden_states.nelement()
    return {"tokens": tokens, "hidden": hidden, "bytes": size, **timings}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
