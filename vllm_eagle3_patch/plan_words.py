"""What the plan found a file to be, as data (``FileFact``), and the words its reason and refusal say.

The plan records facts; the words live here, so that deciding a file's state and saying it are apart.
They sit below ``plan.py`` (which answers ``FilePlan.reason``) because the layers that read the plan (apply's
refusals, ``verify``, ``doctor``, ``status --architectures``) still read its reasons as text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from . import __version__
from .codemod.patch import State
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


def differs(version: str) -> str:
    return f"differs from the installed vLLM {version} (RECORD)"


def file_reason(because: FileReason) -> str:
    """A file's reason: what was found (the codemod's reason), what its original is, and the
    model types a patched gate still refuses."""
    installed, version = because.installed, because.version
    reason = {
        FileFact.JUDGED: because.verdict_reason + _original_note(installed, version, ""),
        FileFact.NOT_FOUND: "file not found",
        FileFact.APPLIED: "applied by vllm-eagle3-patch"
        + _original_note(installed, version, "the original it keeps was "),
        FileFact.CHANGED_SINCE_APPLY: "changed since vllm-eagle3-patch applied it",
        FileFact.UNRECORDED: "patched, but no manifest records it: revert cannot restore it",
        FileFact.UNREADABLE_MANIFEST: "applied by vllm-eagle3-patch (its manifest cannot be read here)",
        FileFact.MARKS_GONE: f"changed since vllm-eagle3-patch applied it (its marks are gone) and {differs(version)}",
        FileFact.MODIFIED_SINCE_INSTALL: f"modified since install: {differs(version)}",
    }[because.fact]
    short = because.short
    if short:
        listed = ", ".join(repr(t) for t in short[:3]) + (f" and {len(short) - 3} more" if len(short) > 3 else "")
        reason += f", but for fewer model types than this install needs: it refuses {listed} until `apply`"
    return reason


def refusal(because: FileReason, install: VllmInstall) -> Optional[str]:
    """Why ``apply`` must leave a modified file alone, and the way out (None: it need not)."""
    fact, reason = because.fact, file_reason(because)
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


def plan_reason(standing: Standing, unreadable: Optional[str], stale_for: Optional[str], stale_files: int) -> str:
    """The installation's reason: its standing, then why the states may mislead (``unreadable``: why the manifest
    cannot be read; ``stale_for``: the vLLM version the manifest was written for, where it is another; ``stale_files``:
    how many files hold other bytes than ``apply`` wrote)."""
    reason = standing_reason(standing)
    if unreadable:
        reason += f" ({unreadable}: the states come from the files' own contents)"
    if stale_for is not None:
        reason += f" (the manifest is stale: written for vLLM {stale_for})"
    elif stale_files:
        reason += f" (the manifest is stale: {stale_files} file(s) hold other bytes than apply wrote; reinstalled?)"
    return reason


def standing_reason(standing: Standing) -> str:
    """What holds the installation back, or what EAGLE-3 is applied for; then the files left alone."""
    state = standing.state
    if standing.blocking is not None:
        path, why = standing.blocking
        reason = f"{path}: {file_reason(why)}"
    elif state is State.NATIVE:
        reason = f"this vLLM supports EAGLE-3 itself for {families_text(standing.native)}"
    else:
        done = "can be applied" if state is State.UNPATCHED else f"applied by vllm-eagle3-patch {__version__}"
        reason = f"EAGLE-3 for {families_text(standing.eagle3)} {done}"
        reason += f"; native for {families_text(standing.native)}" if standing.native else ""
    left_alone = standing.left_alone
    if left_alone and state is not State.UNSUPPORTED:
        more = f" and {len(left_alone) - 3} more (each row says why)" if len(left_alone) > 3 else ""
        reason += f"; left alone (unsupported): {', '.join(left_alone[:3])}{more}"
    return reason


def families_text(families: Families) -> str:
    listed = list(families.named)
    if families.found:
        listed.append(f"{families.found} more model file(s) found in the registry (status --architectures)")
    return ", ".join(listed) or "the model families"
