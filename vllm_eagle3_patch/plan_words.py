"""What the plan found a file to be, as data (``FileFact``), and the words its reason and refusal say.

The plan records facts; the words live here, so that deciding a file's state and saying it are apart.
They sit below ``plan.py`` (which answers ``FilePlan.reason``) because the layers that read the plan (apply's
refusals, ``verify``, ``doctor``, ``status --architectures``) still read its reasons as text.
"""

from __future__ import annotations

import enum
from typing import Optional

from .install.locate import VllmInstall
from .install.record import Comparison, RecordCheck


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


def differs(version: str) -> str:
    return f"differs from the installed vLLM {version} (RECORD)"


def file_reason(
    fact: FileFact, verdict_reason: str, installed: Optional[Comparison], version: str, short: tuple[str, ...]
) -> str:
    """A file's reason: what was found (``verdict_reason``: the codemod's), what its original is, and the
    model types a patched gate still refuses (``short``)."""
    reason = {
        FileFact.JUDGED: verdict_reason + _original_note(installed, version, ""),
        FileFact.NOT_FOUND: "file not found",
        FileFact.APPLIED: "applied by vllm-eagle3-patch"
        + _original_note(installed, version, "the original it keeps was "),
        FileFact.CHANGED_SINCE_APPLY: "changed since vllm-eagle3-patch applied it",
        FileFact.UNRECORDED: "patched, but no manifest records it: revert cannot restore it",
        FileFact.UNREADABLE_MANIFEST: "applied by vllm-eagle3-patch (its manifest cannot be read here)",
        FileFact.MARKS_GONE: f"changed since vllm-eagle3-patch applied it (its marks are gone) and {differs(version)}",
        FileFact.MODIFIED_SINCE_INSTALL: f"modified since install: {differs(version)}",
    }[fact]
    if short:
        listed = ", ".join(repr(t) for t in short[:3]) + (f" and {len(short) - 3} more" if len(short) > 3 else "")
        reason += f", but for fewer model types than this install needs: it refuses {listed} until `apply`"
    return reason


def refusal(fact: FileFact, reason: str, install: VllmInstall) -> Optional[str]:
    """Why ``apply`` must leave a modified file alone, and the way out (None: it need not)."""
    if fact is FileFact.CHANGED_SINCE_APPLY:
        return f"{reason}; run `{install.command('revert', '--force')}` first"
    if fact is FileFact.MARKS_GONE:
        return f"{reason}; `{install.command('revert', '--force')}` restores vLLM's original"
    if fact is FileFact.MODIFIED_SINCE_INSTALL:
        return (
            f"{differs(install.version)}; reinstall vLLM (`{install.reinstall_command()}`) or run "
            f"`{install.command('apply', '--accept-modified')}` to take the current bytes as the original"
        )
    return None


def _original_note(installed: Optional[Comparison], version: str, subject: str) -> str:
    """What a file's reason says about its original (``subject``: the file itself, or its backup)."""
    check = installed.check if installed is not None else None
    if check is RecordCheck.MODIFIED:
        return f"; {subject}modified since install: {differs(version)}"
    if check is RecordCheck.ACCEPTED:
        return f"; {subject}modified since install, accepted with --accept-modified ({differs(version)})"
    return ""
