"""The words of the plan's facts: a file's reason (``plan_facts.FileReason``), the installation's (its
``Standing``), and why ``apply`` must leave a modified file alone."""

from __future__ import annotations

from typing import Optional

from .. import __version__
from ..codemod.patch import State
from ..install.locate import VllmInstall
from ..install.record import Comparison, RecordCheck
from ..plan import Plan
from ..plan_facts import Families, FileFact, FileReason, Standing


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


def plan_reason(plan: Plan) -> str:
    """The installation's reason: an unfinished run, or its standing, then why the states may mislead."""
    if plan.interruption:  # why files differ from the manifest, and what to do: no stale note; the rows say the rest
        return plan.interruption.reason(plan.install.command)
    if plan.release.unknown is not None:
        return f"{plan.release.no_eagle3}; apply refuses"
    reason = standing_reason(plan.standing)
    if plan.unreadable_state:
        reason += f" ({plan.unreadable_state}: the states come from the files' own contents)"
    if plan.stale_for is not None:
        reason += f" (the manifest is stale: written for vLLM {plan.stale_for})"
    elif plan.stale_files:
        reason += (
            f" (the manifest is stale: {plan.stale_files} file(s) hold other bytes than apply wrote; reinstalled?)"
        )
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
        named = left_alone[0] + (f" and {len(left_alone) - 1} more" if len(left_alone) > 1 else "")
        reason += f"; left alone (unsupported, each row says why): {named}"
    return reason


def families_text(families: Families) -> str:
    """The first families by name, then a count: the state line stays one line (``status --architectures`` lists
    them all)."""
    listed = list(families.named[:2])
    more = len(families.named) - len(listed) + families.found
    if more:
        listed.append(f"{more} more model file(s) (status --architectures)")
    return ", ".join(listed) or "the model families"
