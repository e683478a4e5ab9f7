"""The one line ``apply`` and ``revert`` end with, said from what they did (``changes.Outcome``): the text
prints it, and the ``--json`` object carries it as ``message``; and the line ``apply`` refuses with
(``changes.Refused``)."""

from __future__ import annotations

from typing import Optional

from ..changes import Done, Outcome, Refused
from ..codemod.patch import State
from ..errors import ToolError
from ..install.record import RecordCheck
from .plan_words import file_reason, refusal


def outcome_message(outcome: Outcome) -> str:
    version = outcome.vllm_version
    if outcome.done is Done.NOTHING_TO_REVERT:
        left = f"; removed what an interrupted {outcome.interrupted} left" if outcome.interrupted else ""
        return f"nothing to revert: no vllm-eagle3-patch manifest in this vLLM{left}"
    if outcome.done is Done.RESTORED:
        message = f"restored {len(outcome.files)} original file(s) of vLLM {version}{_restored_note(outcome)}"
        if outcome.overwritten:
            message += f"; the changes made since apply to {', '.join(outcome.overwritten)} are gone (--force)"
        if outcome.reinstalled:
            reinstalled = ", ".join(outcome.reinstalled)
            message += f"; left {reinstalled} as it is: it holds the installed vLLM's bytes (RECORD) again"
        return message + _after(outcome.interrupted, "revert")
    edited = f"; left alone, modified since install: {', '.join(outcome.edited)}" if outcome.edited else ""
    after = _after(outcome.interrupted, "apply")
    if outcome.done is Done.NATIVE:
        return f"vLLM {version} supports EAGLE-3 natively; nothing to do{after}{edited}"
    if outcome.done is Done.ALREADY_PATCHED:
        return f"vLLM {version} is already patched; nothing to do{after}{edited}"
    return f"patched {len(outcome.files)} file(s) of vLLM {version}{after}{edited}"


def _after(interrupted: Optional[str], command: str) -> str:
    """What ``command`` did to the run a kill interrupted: finished or undid it."""
    if interrupted is None:
        return ""
    return f"; {'finished' if interrupted == command else 'undid'} the interrupted {interrupted}"


def _restored_note(outcome: Outcome) -> str:
    """Whether what revert put back is what the installer wrote."""
    restored = outcome.originals
    edited = (RecordCheck.MODIFIED.value, RecordCheck.ACCEPTED.value)
    differing = sorted(path for path, check in restored.items() if check in edited)
    if differing:
        verb = "differs" if len(differing) == 1 else "differ"
        installed = f"the installed vLLM {outcome.vllm_version} (RECORD)"
        return f"; {', '.join(differing)} {verb} from {installed}: edited before apply"
    if restored and all(check == RecordCheck.MATCHES.value for check in restored.values()):
        return "; they match its RECORD"
    return "; they cannot be checked against a RECORD"


def error_message(error: ToolError) -> str:
    """The one line a refusal or failure says: ``apply``'s refusal worded from its facts, any other as raised."""
    return refusal_message(error) if isinstance(error, Refused) else str(error)


def refusal_message(refused: Refused) -> str:
    """The file ``apply`` cannot patch, or must leave alone, why, and the way out; nothing was written."""
    file, install = refused.file, refused.install
    if file.state is State.UNSUPPORTED:
        return f"{install.package_dir / f'{file.path}: {file_reason(file.because)}'}; nothing was changed"
    return f"{install.package_dir / file.path}: {refusal(file.because, install)}. Nothing was changed"
