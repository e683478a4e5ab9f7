"""The words of the facts the layers below return: what ``text.py`` prints and ``json_objects.py`` carries
say the same thing because both take their words from here."""

from __future__ import annotations

from typing import Union

from ..plan_words import file_reason
from ..verification.checks import Check
from ..verification.verify import Expected, FileCheck


def check_words(check: Union[Check, FileCheck]) -> tuple[str, str]:
    """A check's name and detail: a file's static check says what the file is, and why."""
    if isinstance(check, Check):
        return check.name, check.detail
    file, reason = check.file, file_reason(check.file.because)
    if check.expected is Expected.LEFT_ALONE:
        return f"{file.path} is left alone", f"apply cannot patch it: {reason}"
    detail = reason if check.expected is Expected.MET else f"expected patched or native: {reason}"
    return f"{file.path} is {file.state.value}", detail
