"""What the plan found a file to be (``FileFact``, ``FileReason``) and how far along the files are (``Standing``),
as facts: the plan decides on them, and ``render/plan_words.py`` says them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from .codemod.patch import State
from .install.record import Comparison


class FileFact(enum.Enum):
    """The kind of a file's reason: the codemod's verdict, or what the plan found beyond it."""

    JUDGED = "judged"
    """The codemod's verdict stands (its reason), with what the plan knows of the original."""
    NOT_FOUND = "not found"
    """A required file the release does not have."""
    APPLIED = "applied"
    """The bytes an earlier ``apply`` wrote, as its manifest records them."""
    CHANGED_SINCE_APPLY = "changed since apply"
    """Patched, named by the manifest, but holding other bytes than ``apply`` wrote."""
    UNRECORDED = "unrecorded"
    """Patched, and no manifest records it: ``revert`` cannot restore it."""
    UNREADABLE_MANIFEST = "unreadable manifest"
    """Patched, and the manifest cannot be read by this user."""
    MARKS_GONE = "marks gone"
    """Edited after ``apply``, its marks with it, and differing from vLLM's RECORD."""
    MODIFIED_SINCE_INSTALL = "modified since install"
    """Unpatched and differing from vLLM's RECORD, not accepted with ``--accept-modified``."""


@dataclass(frozen=True)
class FileReason:
    """Why a file is in its state, as facts: what the plan found, and the values its words name."""

    fact: FileFact
    verdict_reason: str = ""
    """The codemod's reason, where its verdict stands (``FileFact.JUDGED``)."""
    installed: Optional[Comparison] = None
    """How the file's original compares with vLLM's RECORD (None: there is no original to keep)."""
    version: str = ""
    """The installed vLLM's version, which the words name where the file differs from its RECORD."""
    short: tuple[str, ...] = ()
    """The model types a patched file (the gate) still refuses: the next ``apply`` completes it."""


@dataclass(frozen=True)
class Families:
    """The model families some files serve: the catalog's by name, in its order, and how many more the rule found."""

    named: tuple[str, ...] = ()
    found: int = 0

    def __bool__(self) -> bool:
        return bool(self.named or self.found)


@dataclass(frozen=True)
class Standing:
    """How far along the installation's files are (``plan.overall_state``), as facts."""

    state: State
    blocking: Optional[tuple[str, FileReason]] = None
    """Unsupported or modified: the file that holds the others back, and why."""
    eagle3: Families = Families()
    """Unpatched or patched: the families EAGLE-3 is (or can be) applied for."""
    native: Families = Families()
    """The families this vLLM serves with EAGLE-3 itself."""
    left_alone: tuple[str, ...] = ()
    """The optional files left alone as unsupported, the catalog's families first."""
