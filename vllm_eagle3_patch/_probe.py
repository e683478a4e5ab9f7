"""Ask an interpreter where its ``vllm`` package is, without importing vLLM.

Run in-process for the current interpreter and as a script (by path) for ``--python``,
so one piece of code answers both ways; it imports only the standard library.
"""

from __future__ import annotations

import importlib.util
import json


def find_vllm() -> dict:
    """``{"location": str | None, "version": str | None}`` as this interpreter sees it."""
    spec = importlib.util.find_spec("vllm")
    location = None
    if spec is not None and spec.submodule_search_locations:
        location = list(spec.submodule_search_locations)[0]
    from importlib import metadata  # here, not at the top: --vllm-dir runs never need it (25 ms)

    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        version = None
    return {"location": location, "version": version}


if __name__ == "__main__":
    print(json.dumps(find_vllm()))
