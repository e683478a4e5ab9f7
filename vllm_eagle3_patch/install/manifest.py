"""The tool's state inside the vLLM package: a manifest and the original bytes of each file.

Layout: ``vllm/.vllm-eagle3-patch/manifest.json`` and ``.../backups/<path relative to vllm/>``.
Living inside the package keeps the state with the files it describes (one per
environment, found without configuration) and outside Python's import path (the
directory name is not an identifier).  The manifest is written *before* patched files
replace the originals and records both hashes, so whatever happens in between, each file
on disk is recognisably either its original or its patched version.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Optional, Sequence

from ..errors import ToolError
from .fileio import (
    compiled_files,
    left_temporaries,
    link_all,
    make_directories,
    sweep_temporaries,
    write_atomically,
)
from .journal import UNKNOWN, Interruption, Journal, journal_directories
from .lock import held

STATE_DIR = ".vllm-eagle3-patch"
SCHEMA = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileRecord:
    """One patched file: the hash of its original bytes and of what ``apply`` wrote."""

    sha256_before: str
    sha256_after: str
    accepted_modified: bool = False
    """The original differed from vLLM's RECORD and was taken anyway (``apply --accept-modified``).
    Manifests written before this field existed lack it: their originals were not checked."""


@dataclass(frozen=True)
class Manifest:
    tool_version: str
    vllm_version: str
    aux_layers: Optional[tuple[int, ...]] = None
    files: dict[str, FileRecord] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {
            "schema": SCHEMA,
            "tool": "vllm-eagle3-patch",
            "tool_version": self.tool_version,
            "vllm_version": self.vllm_version,
            "aux_layers": list(self.aux_layers) if self.aux_layers is not None else None,
            "files": {path: vars(record) for path, record in sorted(self.files.items())},
        }
        return json.dumps(data, indent=2) + "\n"


class StateDir:
    """Reads and writes the manifest and backups of one vLLM package directory."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.path = package_dir / STATE_DIR
        self.manifest_path = self.path / "manifest.json"
        self.journal_path = self.path / "journal.json"

    def backup_path(self, relative: str) -> Path:
        return self.path / "backups" / safe_relative(relative, self.manifest_path)

    def load(self) -> Optional[Manifest]:
        """The manifest, or None when there is none; a damaged one is refused."""
        if not self.manifest_path.exists():
            return None
        try:
            manifest = _parse(json.loads(self.manifest_path.read_text(encoding="utf-8")), self.manifest_path)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ToolError(f"{self.manifest_path}: damaged manifest ({error}); nothing was changed") from None
        for relative in manifest.files:
            self._refuse_links_out(self.package_dir / relative, self.package_dir, relative)
            self._refuse_links_out(self.backup_path(relative), self.path, relative)
        return manifest

    def load_for_reading(self) -> tuple[Optional[Manifest], Optional[str]]:
        """The manifest, or (None, why) where this user cannot read it: what ``status`` and
        ``verify`` still report from the files' own hashes and marks."""
        try:
            return self.load(), None
        except PermissionError as error:
            return None, f"{self.manifest_path}: cannot be read by this user ({error.strerror})"

    def _refuse_links_out(self, path: Path, root: Path, relative: str) -> None:
        """A directory link on the way must not lead a write outside ``root``."""
        if not path.parent.resolve().is_relative_to(root.resolve()):
            raise ToolError(
                f"{self.manifest_path}: refusing path {relative!r}: a link leads it outside {root}; nothing was changed"
            )

    def save(self, manifest: Manifest) -> None:
        self._write(self.manifest_path, manifest.to_json().encode("utf-8"))

    def make(self) -> None:
        """The state directory, readable by whoever can read the package (its modes)."""
        make_directories(self.path, like=self.package_dir)

    def _write(self, path: Path, data: bytes) -> None:
        """Files take the modes of the package's own ``__init__.py``: a root ``apply`` in a Docker
        build leaves a state every user who can read vLLM can read (``status`` in the pod)."""
        make_directories(path.parent, like=self.package_dir)
        write_atomically(path, data, like=self.package_dir / "__init__.py")

    def save_journal(self, journal: Journal) -> None:
        """Before the first file of a run changes: from here on, a kill is seen (``journal.py``)."""
        self._write(self.journal_path, journal.to_json().encode("utf-8"))

    def load_journal(self) -> Optional[Journal]:
        """The journal of a run that has not finished (None: there is none)."""
        try:
            journal = Journal.parse(self.journal_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError):
            return Journal(UNKNOWN)  # there, but unreadable here: still an interruption
        try:
            for relative in journal.files:
                safe_relative(relative, self.journal_path)
        except ToolError:
            return Journal(UNKNOWN)
        return journal

    def clear_journal(self) -> None:
        """After the last file of a run: the tree is as the run meant it."""
        self.journal_path.unlink(missing_ok=True)

    def interruption(self) -> Optional[Interruption]:
        """What the journal says, for ``status``: None when no run is unfinished."""
        journal = self.load_journal()
        if journal is None:
            return None
        written = sum(_sha256_of(self.package_dir / path) == digest for path, digest in journal.files.items())
        temporaries = left_temporaries(journal_directories(self.package_dir, journal))
        return Interruption(journal, written, held(self.path), tuple(temporaries))

    def sweep(self, paths: Iterable[str] = ()) -> list[Path]:
        """Remove the temporary files a killed run left: in the state directory, and beside the files
        of the journal and ``paths`` (the files a run is about to write).  Under the lock only."""
        removed = sweep_temporaries(self.path, recursive=True) if self.path.is_dir() else []
        journal = self.load_journal() or Journal(UNKNOWN)
        named = Journal(journal.command, {**journal.files, **dict.fromkeys(paths, "")})
        for directory in journal_directories(self.package_dir, named):
            removed += sweep_temporaries(directory)
        return removed

    def read_backup(self, relative: str, record: FileRecord) -> bytes:
        """The original bytes, only if they still hash to what the manifest recorded."""
        path = self.backup_path(relative)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise ToolError(f"{path}: backup of {relative} unreadable ({error.strerror})") from None
        if sha256(data) != record.sha256_before:
            raise ToolError(f"{path}: backup of {relative} no longer matches the manifest; not using it")
        return data

    def save_backups(self, backups: Sequence[tuple[str, bytes]]) -> None:
        """Each ``(relative, original)`` as its backup: a second name of the file, which ``apply`` then replaces
        by a rename (``fileio.link_all``: no byte written), else a copy; an error names the backup."""
        for relative, _ in backups:
            make_directories(self.backup_path(relative).parent, like=self.package_dir)
        files = [(self.package_dir / relative, self.backup_path(relative), data) for relative, data in backups]
        link_all(files, like=self.package_dir / "__init__.py")

    def bytecode_dir(self, relative: str) -> Path:
        """Where the installer's bytecode of the file lives while it is patched (``apply`` drops it
        from ``__pycache__`` so Python compiles the new text; RECORD lists it)."""
        return self.path / "bytecode" / safe_relative(relative, self.manifest_path)

    def save_bytecode(self, relatives: Sequence[str]) -> None:
        """Keep each file's bytecode once, the first time it is dropped (the installer's): each a second name of
        the file it keeps (``fileio.link_all``), since dropping it only unlinks it.  An error names the file."""
        pairs = [
            (compiled, self.bytecode_dir(relative) / compiled.name, None)
            for relative in relatives
            if not self.bytecode_dir(relative).exists()
            for compiled in compiled_files(self.package_dir / relative)
        ]
        for directory in dict.fromkeys(kept.parent for _, kept, _ in pairs):
            make_directories(directory, like=self.package_dir)
        link_all(pairs, like=self.package_dir / "__init__.py")

    def saved_bytecode(self, relative: str) -> dict[str, bytes]:
        kept = self.bytecode_dir(relative)
        return {path.name: path.read_bytes() for path in sorted(kept.glob("*.pyc"))} if kept.is_dir() else {}


def _sha256_of(path: Path) -> Optional[str]:
    try:
        return sha256(path.read_bytes())
    except OSError:
        return None


def safe_relative(relative: str, source: Path) -> str:
    """A manifest path must stay inside the vLLM package: no absolute paths, no ``..``."""
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or any(part in ("..", "", ".") for part in path.parts) or "\\" in relative:
        raise ToolError(f"{source}: refusing path {relative!r} outside the vllm package; nothing was changed")
    return str(path)


def _parse(data: dict, source: Path) -> Manifest:
    if data.get("schema") != SCHEMA:
        raise ValueError(f"unknown schema {data.get('schema')!r}")
    files = {}
    for relative, record in data["files"].items():
        hashes = (record["sha256_before"], record["sha256_after"])
        if not all(isinstance(h, str) and _SHA256.match(h) for h in hashes):
            raise ValueError(f"bad hash for {relative}")
        accepted = record.get("accepted_modified", False)
        if not isinstance(accepted, bool):
            raise ValueError(f"bad accepted_modified for {relative}")
        files[safe_relative(relative, source)] = FileRecord(*hashes, accepted_modified=accepted)
    aux = data.get("aux_layers")
    return Manifest(
        tool_version=str(data["tool_version"]),
        vllm_version=str(data["vllm_version"]),
        aux_layers=tuple(int(i) for i in aux) if aux is not None else None,
        files=files,
    )
