"""The journal: which run is rewriting vLLM's files, on disk before the first of them changes.

``apply`` and ``revert`` replace many files one by one.  ``kill -9`` (or a power cut) between two
of them leaves each file whole, but some in their new version and some in their old: a state no
command asked for.  The journal (``.vllm-eagle3-patch/journal.json``: the command and the hash
it writes to each file) is fsynced before the first file is touched and removed after the last,
so the next ``status`` sees the interruption and names it (state ``interrupted``), and the next
``apply`` or ``revert``, which finishes or undoes it, knows where the killed run may have left a
temporary file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

SCHEMA = 1
UNKNOWN = "apply or revert"
"""The command of a journal that cannot be read: still an interruption."""


@dataclass(frozen=True)
class Journal:
    """A run that is rewriting files: ``files`` maps each path (relative to ``vllm/``) to the
    sha256 the run writes there."""

    command: str
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {"schema": SCHEMA, "command": self.command, "files": dict(sorted(self.files.items()))}
        return json.dumps(data, indent=2) + "\n"

    @staticmethod
    def parse(text: str) -> Journal:
        """The journal in ``text``; one that cannot be read (edited by hand?) names no command or file,
        and still says a run was interrupted."""
        try:
            data = json.loads(text)
            files = data["files"]
            if (
                data.get("schema") != SCHEMA
                or data["command"] not in ("apply", "revert")
                or not isinstance(files, dict)
            ):
                raise ValueError
            return Journal(data["command"], {str(path): str(digest) for path, digest in files.items()})
        except (ValueError, TypeError, KeyError, AttributeError):
            return Journal(UNKNOWN)


@dataclass(frozen=True)
class Interruption:
    """What ``status`` says of a journal it finds: a run still at work, or one that was killed."""

    journal: Journal
    written: int
    """How many of the journal's files already hold what the run writes."""
    running: bool
    """Another process holds the lock: the run is at work now, not killed."""
    temporaries: tuple[Path, ...] = ()
    """Temporary files the killed run left beside vLLM's (the next apply or revert removes them)."""

    def reason(self, command: Callable[[str], str]) -> str:
        """For the state's reason; ``command(word)`` is this tool's command line for the same install."""
        name, total = self.journal.command, len(self.journal.files)
        progress = f"{self.written} of {total} file(s) written" if total else "its progress cannot be read"
        if self.running:
            return f"{name} is running in another process now ({progress} so far)"
        redo, undo = ("apply", "revert") if name != "revert" else ("revert", "apply")
        text = (
            f"{name} was interrupted ({progress}; killed?): `{command(redo)}` finishes it, "
            f"`{command(undo)}` {'undoes it' if redo == 'apply' else 'patches again'}"
        )
        if self.temporaries:
            left = f"{len(self.temporaries)} temporary file(s) ({self.temporaries[0]})"
            text += f"; it left {left}, which either command removes"
        return text


def journal_directories(package_dir: Path, journal: Optional[Journal]) -> list[Path]:
    """Where a run that wrote ``journal``'s files may have left temporary files: beside each file
    and in its ``__pycache__`` (the bytecode ``revert`` puts back)."""
    if journal is None:
        return []
    parents = {(package_dir / path).parent for path in journal.files}
    return sorted(d for parent in parents for d in (parent, parent / "__pycache__") if d.is_dir())
