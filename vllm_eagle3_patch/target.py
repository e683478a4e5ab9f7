"""What a patch module in ``patches/`` is, and what it says about a file.

Each module in ``patches/`` exposes ``TARGET``: an object with ``locate`` and ``examine``.
The engine never knows what a patch changes; it only reads, asks, and writes.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Protocol

if TYPE_CHECKING:
    import libcst as cst

    from .outline import Outline

MARKER = "vllm-eagle3-patch"
"""The comment that marks every place this tool changed (``# vllm-eagle3-patch``)."""


class State(str, enum.Enum):
    """The state of one target file, and of the whole installation."""

    UNPATCHED = "unpatched"
    PATCHED = "patched"
    NATIVE = "native"
    UNSUPPORTED = "unsupported"
    MODIFIED = "modified"


@dataclass(frozen=True)
class Options:
    """What the user chose for this run; every codemod gets the same options."""

    aux_layers: Optional[tuple[int, ...]] = None
    """Layer ids ``get_eagle3_aux_hidden_state_layers`` returns; None: the upstream default."""


@dataclass(frozen=True)
class Verdict:
    """A codemod's answer for one source text.

    ``tree`` is the patched module when the state is UNPATCHED (and when it is PATCHED with
    this tool's marks, it is None: the codemod cannot rebuild the original); ``outline``
    puts back the function bodies it was parsed without.
    """

    state: State
    reason: str
    tree: Optional[cst.Module] = None
    outline: Optional[Outline] = None

    @cached_property
    def patched(self) -> Optional[str]:
        """The patched text, written out only when asked: ``status`` never needs it, and
        writing out a module costs about as much as its transform."""
        if self.tree is None:
            return None
        code = self.tree.code if self.outline is None else self.outline.restore(self.tree.code)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # vLLM's own invalid escapes are not ours to report
            compile(code, "<patched>", "exec")  # a codemod bug must never reach a user's disk
        return code


ReadFile = Callable[[str], Optional[str]]
"""Reads a file of the same vLLM tree by its path relative to ``vllm/`` (None: absent)."""


class Target(Protocol):
    """One place in vLLM that this tool may change."""

    name: str
    """Short human name, e.g. "DeepSeek-V2/V3 model"."""
    required: bool
    """Whether a release without this file is unsupported (else the target just does not apply)."""
    optional: bool
    """Whether an unsupported verdict leaves this file alone instead of refusing the whole run:
    a model family a user of another family does not need (see :func:`plan.overall_state`)."""
    default_path: str
    """Where the file usually is, to name it when it is missing."""

    def locate(self, package_dir: Path) -> Optional[str]:
        """The file's path relative to ``vllm/`` in this release, or None if it has no such file."""

    def examine(self, source: str, read: ReadFile, options: Options) -> Verdict:
        """Classify ``source`` and, when it is patchable, return the patched text."""


class SingleFileTarget:
    """A target that is one file at a fixed path, present or not in a given release."""

    path: str
    name: str
    required = False
    optional = False

    @property
    def default_path(self) -> str:
        return self.path

    def locate(self, package_dir: Path) -> Optional[str]:
        return self.path if (package_dir / self.path).is_file() else None


class Unrecognised(Exception):
    """Raised inside a codemod when the source lacks the structure it expects."""
