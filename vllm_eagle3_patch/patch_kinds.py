"""Kinds of patch: how an entry of the catalog (``catalog.PATCHES``) becomes the patches of one release.

The plan asks every entry for its patches with what it has found in the release (:class:`Found`), and
knows nothing of what an entry is.  An entry planned after the model files is handed their verdicts
(``Found.eagle3``): the gate admits the model types of the families whose files are EAGLE-3 targets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, ClassVar, Optional, Protocol

from .codemod.family import Family, FoundWrapper
from .codemod.patch import Patch
from .discovery import Discovery
from .eagle3.release import Release, admitted_entries
from .patches.decoder_eagle3 import DecoderPatch
from .patches.speculative_gate import SpeculativeGatePatch
from .patches.wrapper_eagle3 import FoundWrappersPatch


@dataclass(frozen=True)
class Found:
    """What the plan hands an entry of the catalog when it asks for its patches."""

    discovery: Discovery = Discovery(())
    """The families found by rule in the release's own registry, and the architectures upstream serves."""
    only: Optional[tuple[str, ...]] = None
    """``apply --only``'s architectures (None: every one)."""
    release: Optional[Release] = None
    before_apply: Callable[[str], Optional[str]] = lambda path: None
    """A file as it was before an earlier ``apply`` patched it (its backup); None where none did."""
    eagle3: frozenset[str] = frozenset()
    """Handed to the entries planned after the model files: the families whose files are EAGLE-3 targets
    (unpatched or patched)."""


class PatchKind(Protocol):
    """An entry of the catalog."""

    @property
    def after_model_files(self) -> bool:
        """Planned once the model files are, and handed their verdicts (``Found.eagle3``)."""

    def patches(self, found: Found) -> tuple[Patch, ...]:
        """The patches of this entry, given what the plan found."""


@dataclass(frozen=True)
class ModelFiles:
    """Each family's model file, then the files of the families found by rule (``discovery.py``), one patch
    per file; a file of ``families`` is theirs alone.  A family whose bare model a multimodal wrapper holds as its
    language model answers ``model`` with it where the rule found that sound (``FoundWrapper.answers_model``)."""

    families: tuple[Family, ...]
    after_model_files: ClassVar[bool] = False

    def patches(self, found: Found) -> tuple[Patch, ...]:
        answering = {w.family.name for w in found.discovery.wrappers.values() if w.answers_model and w.family}
        patches: list[Patch] = [DecoderPatch(_answering(family, answering)) for family in self.families]
        by_path: dict[str, list[Family]] = {}
        for family in found.discovery.families:
            by_path.setdefault(family.path, []).append(_answering(family, answering))
        owned = {family.path for family in self.families}
        patches += [DecoderPatch(*families) for path, families in by_path.items() if path not in owned]
        return tuple(patches)


def _answering(family: Family, answering: set[str]) -> Family:
    return replace(family, answers_model=True) if family.name in answering else family


@dataclass(frozen=True)
class MultimodalWrappers:
    """The multimodal classes found by rule (``multimodal.py``), one patch per file; a file a family's patch
    patches is that family's alone (its classes are judged through the family, as the text ones are)."""

    families: tuple[Family, ...]
    after_model_files: ClassVar[bool] = False

    def patches(self, found: Found) -> tuple[Patch, ...]:
        owned = {family.path for family in (*self.families, *found.discovery.families)}
        by_path: dict[str, list[FoundWrapper]] = {}
        for wrapper in found.discovery.wrappers.values():
            if wrapper.wrapper.path not in owned:
                by_path.setdefault(wrapper.wrapper.path, []).append(wrapper)
        return tuple(FoundWrappersPatch(path, tuple(wrappers)) for path, wrappers in by_path.items())


@dataclass(frozen=True)
class OneFile:
    """A change that is one file, whatever the families (the proposer's fix)."""

    patch: Patch
    after_model_files: ClassVar[bool] = False

    def patches(self, found: Found) -> tuple[Patch, ...]:
        return (self.patch,)


@dataclass(frozen=True)
class Gate:
    """The speculative-config gate, planned after the model files: it admits ``model_types`` (the catalog's
    families'), the types of the families found by rule whose files are EAGLE-3 targets and of the multimodal
    wrappers whose language models are, and those of the
    architectures upstream serves with EAGLE-3 (those asked for, with ``--only``).  A partial apply
    (``--only``) never takes away what an earlier ``apply`` opened the gate to."""

    model_types: tuple[str, ...]
    after_model_files: ClassVar[bool] = True

    def patches(self, found: Found) -> tuple[Patch, ...]:
        discovery = found.discovery
        more = [t for family in discovery.families if family.name in found.eagle3 for t in family.model_types]
        more += [
            t
            for wrapper in discovery.wrappers.values()
            if wrapper.family is None or wrapper.family.name in found.eagle3
            for t in wrapper.model_types
        ]
        asked = discovery.native if found.only is None else {a: discovery.native.get(a, ()) for a in found.only}
        more += [t for types in asked.values() for t in types]
        if found.only is not None:
            more += _opened_before(found)
        admitted = (*self.model_types, *(t for t in dict.fromkeys(more) if t not in self.model_types))
        return (SpeculativeGatePatch(admitted),)


def _opened_before(found: Found) -> tuple[str, ...]:
    """The entries an earlier ``apply`` added to the gate (those of the file beyond its backup's)."""
    path = found.release.gate_file if found.release else None
    before = found.before_apply(path) if found.release and path else None
    if found.release is None or path is None or before is None:
        return ()
    kept = set(admitted_entries(before))
    return tuple(entry for entry in admitted_entries(found.release.read(path) or "") if entry not in kept)
