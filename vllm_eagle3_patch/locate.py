"""Find the installed vLLM package and its release without importing vLLM (or torch).

Importing vLLM costs seconds, needs its dependencies, and may fail in exactly the broken
environment the user wants to inspect; its location and version are plain metadata.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import _probe
from ._probe import find_vllm
from .errors import ToolError

UNKNOWN_VERSION = "unknown"

@dataclass(frozen=True)
class VllmInstall:
    """A vLLM package directory and the release it claims to be."""

    package_dir: Path
    version: str

    @property
    def root(self) -> Path:
        """The directory holding ``vllm/``: git-style diff paths are relative to it."""
        return self.package_dir.parent


def from_package_dir(directory: Path) -> VllmInstall:
    """A ``vllm`` directory given by the user; the release comes from the dist-info beside it."""
    directory = Path(directory).resolve()  # through symlinks: the dist-info sits beside the real one
    if not (directory / "__init__.py").is_file():
        raise ToolError(f"{directory}: not a vllm package directory (expected {directory / '__init__.py'})")
    return VllmInstall(directory, _version_beside(directory))


def from_interpreter(python: str | None = None) -> VllmInstall:
    """The vLLM that ``python`` (default: this interpreter) would import."""
    if python is None:
        found = find_vllm()
        where = "this Python's sys.path"
    else:
        found = _probe_other(python)
        where = f"the sys.path of {python}"
    if not found.get("location"):
        raise ToolError(f"no vllm package found on {where} (use --vllm-dir DIR to name one)")
    directory = Path(found["location"]).resolve()
    return VllmInstall(directory, _version_beside(directory, fallback=found.get("version")))


def _probe_other(python: str) -> dict:
    try:
        completed = subprocess.run(
            [python, str(Path(_probe.__file__))], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolError(f"{python}: cannot run this interpreter ({error})") from None
    if completed.returncode != 0:
        last_line = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolError(f"{python}: interpreter failed to report its vllm ({last_line})")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _version_beside(package_dir: Path, fallback: str | None = None) -> str:
    """Read ``Version:`` from the ``vllm-*.dist-info/METADATA`` next to the package.

    The dist-info next to the files is the truth about those files; an interpreter's
    metadata lookup can disagree when several copies are on its path.
    """
    for metadata in sorted(package_dir.parent.glob("vllm-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break
    return fallback or UNKNOWN_VERSION
