"""What a patch is (one place in vLLM this tool may change), and what a codemod says about a file.

The catalog (``vllm_eagle3_patch.catalog``) lists the patches; each has ``locate`` and
``examine``.  The plan never knows what a patch changes; it only reads, asks, and writes.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Optional, Protocol

from ..eagle3.release import MARKER as MARKER  # re-exported: the codemods' name for it
from ..eagle3.release import Release

if TYPE_CHECKING:
    import libcst as cst

    from .outline import Outline


class State(str, enum.Enum):
    """The state of one file to patch, and of the whole installation."""

    UNPATCHED = "unpatched"
    PATCHED = "patched"
    NATIVE = "native"
    UNSUPPORTED = "unsupported"
    MODIFIED = "modified"
    INTERRUPTED = "interrupted"
    """The installation only: an ``apply`` or ``revert`` stopped part-way (``install/journal.py``)."""
    UNKNOWN = "unknown"
    """The installation only: searching the tree did not establish the release's EAGLE-3 interface
    (``Release.unknown``): nothing is judged a target, and ``apply`` refuses."""


class Policy(str, enum.Enum):
    """What a file this tool cannot patch means for the rest of the run."""

    REQUIRED = "required"
    """The tool's first purpose (DeepSeek): a release without a patchable file is refused as a whole."""
    BLOCKING = "blocking"
    """Where the file exists, it must be patchable, or nothing is patched (the gate, Kimi-K2.5's wrapper)."""
    OPTIONAL = "optional"
    """A model family a user of another family does not need: left alone where it cannot be
    patched, the other patches still applied (see :func:`plan.overall_state`)."""


@dataclass(frozen=True)
class Options:
    """What the user chose for this run; every codemod gets the same options."""

    aux_layers: Optional[tuple[int, ...]] = None
    """Layer ids ``get_eagle3_aux_hidden_state_layers`` returns; None: the upstream default."""
    source: str = field(default="the default", compare=False)
    """Where the ids came from, for the user: the default, an option, a drafter, a previous apply."""


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

    @classmethod
    def written(cls, state: State, reason: str, text: Optional[str]) -> Verdict:
        """A verdict whose patched text was written out (and compiled) in another process."""
        verdict = cls(state, reason)
        verdict.__dict__["patched"] = text  # what the cached property would hold
        return verdict

    @cached_property
    def patched(self) -> Optional[str]:
        """The patched text, written out only when asked: ``status`` never needs it, and
        writing out a module costs about as much as its transform."""
        if self.tree is None:
            return None
        from .cst_tools import written  # which imports this module

        code = written(self.tree)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # vLLM's own invalid escapes are not ours to report
            compile(code, "<patched>", "exec")  # a codemod bug must never reach a user's disk
        # Compiling the outline checks every line a codemod wrote; the bodies set aside come back verbatim,
        # each at the indentation it left (``Outline.restore`` checks it), so the whole compiles too.
        return code if self.outline is None else self.outline.restore(code)


class Patch(Protocol):
    """One place in vLLM that this tool may change."""

    # Read-only properties: a patch may answer them with a property, an attribute or a class attribute.
    @property
    def name(self) -> str:
        """Short human name, e.g. "DeepSeek-V2/V3 model"."""

    @property
    def policy(self) -> Policy: ...

    @property
    def serves(self) -> Optional[str]:
        """The model family the file serves, for messages (None: all of them, like the gate)."""

    @property
    def default_path(self) -> str:
        """Where the file usually is, to name it when it is missing."""

    @property
    def serves_families(self) -> tuple[str, ...]:
        """Every family the file serves (several where causal LMs found by rule share a file): ``apply --only``."""

    @property
    def cache_key(self) -> str:
        """What the patch is made of, for the verdict cache: its name, or its families, or the gate's types."""

    @property
    def replanned(self) -> bool:
        """Planned from its original on every ``apply`` instead of kept by hash (the gate: its types follow the
        model files patched with it)."""

    def locate(self, release: Release) -> Optional[str]:
        """The file's path relative to ``vllm/`` in this release, or None if it has no such file."""

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        """Classify ``source`` and, when it is patchable, return the patched text."""

    def falls_short(self, source: str) -> tuple[str, ...]:
        """What ``source``, patched by this tool, still lacks of what this patch adds (the gate: model types
        an earlier ``apply --only`` left out): such a file is not ``patched`` yet.  Empty: nothing."""


class SingleFilePatch:
    """A patch that is one file at a fixed path, present or not in a given release."""

    path: str
    name: str
    policy = Policy.BLOCKING
    serves: Optional[str] = None
    replanned = False

    @property
    def default_path(self) -> str:
        return self.path

    @property
    def serves_families(self) -> tuple[str, ...]:
        return (self.serves,) if self.serves else ()

    @property
    def cache_key(self) -> str:
        return self.name

    def falls_short(self, source: str) -> tuple[str, ...]:
        return ()  # a file's patch is whole: its marks say it all

    def locate(self, release: Release) -> Optional[str]:
        return self.path if release.exists(self.path) else None


class Unrecognised(Exception):
    """Raised inside a codemod when the source lacks the structure it expects."""
