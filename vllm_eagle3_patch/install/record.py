"""What the installer wrote: the hashes in the ``RECORD`` of the distribution that installed vLLM.

pip and uv write ``<dist>.dist-info/RECORD`` with the sha256 of every file they install (pip
uninstalls by it).  A hand edit of a vLLM file does not touch it, so it is the witness of vLLM's
original bytes: ``apply`` takes no original that disagrees with it.  Lines are CSV rows
``path,sha256=<urlsafe base64 without padding>,size``, paths relative to the directory holding
the dist-info.  The file is read once, on the first question, and only when one is asked.
"""

from __future__ import annotations

import base64
import binascii
import csv
import enum
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional


class RecordCheck(str, enum.Enum):
    """How the bytes a plan takes for a file's original compare with RECORD."""

    MATCHES = "matches-record"
    MODIFIED = "modified-since-install"
    ACCEPTED = "accepted-modified"
    """Differs from RECORD, taken as the original on purpose (``apply --accept-modified``)."""
    UNCHECKED = "unchecked"


@dataclass(frozen=True)
class Comparison:
    """A check and, for a human, why (``detail`` says what was missing when it is UNCHECKED)."""

    check: RecordCheck
    detail: str


class Record:
    """The RECORD of one distribution, answering for the files of one package directory."""

    def __init__(self, path: Path, package: str) -> None:
        self.path = path
        self.package = package
        """The package directory's name (``vllm``): RECORD paths start with it."""

    @cached_property
    def _text(self) -> str:
        try:
            return "\n" + self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def _fields(self, relative: str) -> Optional[list[str]]:
        """The fields after the path on the line for ``vllm/<relative>`` (None: no such line).

        A search for the one line, not a parse of all of them: RECORD lists thousands of files
        and ``status`` asks about four."""
        path = f"{self.package}/{relative}"
        start = self._text.find(f"\n{path},")
        if start < 0:
            return None
        end = self._text.find("\n", start + 1)
        row = next(csv.reader([self._text[start + 1 : end if end >= 0 else None]]), [])
        return row[1:] if row[:1] == [path] else None

    def compare(self, relative: str, sha256_hex: str) -> Comparison:
        """Compare the sha256 (hex) of some bytes with RECORD's line for ``vllm/<relative>``."""
        fields = self._fields(relative)
        if fields is None:
            return Comparison(RecordCheck.UNCHECKED, f"{self.path} has no line for it")
        expected = _sha256_hex(fields[0] if fields else "")
        if expected is None:
            return Comparison(RecordCheck.UNCHECKED, f"its line in {self.path} has no sha256 this tool can read")
        if expected == sha256_hex:
            return Comparison(RecordCheck.MATCHES, f"matches {self.path}")
        return Comparison(RecordCheck.MODIFIED, f"differs from {self.path}")


def compare_with_record(record: Optional[Record], relative: str, sha256_hex: str) -> Comparison:
    """``record.compare``, or UNCHECKED where the install has no RECORD (editable, source, some distros)."""
    if record is None:
        return Comparison(RecordCheck.UNCHECKED, "no RECORD beside the package: originals cannot be checked")
    return record.compare(relative, sha256_hex)


def compare_original(record: Optional[Record], relative: str, sha256_hex: str, accepted_modified: bool) -> Comparison:
    """How bytes a plan takes (or a manifest kept) for a file's original compare with RECORD;
    ``accepted_modified``: ``apply --accept-modified`` took them although they differ."""
    comparison = compare_with_record(record, relative, sha256_hex)
    if accepted_modified and comparison.check is RecordCheck.MODIFIED:
        return Comparison(RecordCheck.ACCEPTED, f"{comparison.detail}, taken as the original (--accept-modified)")
    return comparison


def _sha256_hex(field: str) -> Optional[str]:
    """``sha256=<urlsafe b64>`` as hex, or None (another algorithm, empty, or not base64)."""
    algorithm, _, encoded = field.partition("=")
    if algorithm != "sha256" or not encoded:
        return None
    try:
        digest = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        return None
    return digest.hex() if len(digest) == 32 else None
