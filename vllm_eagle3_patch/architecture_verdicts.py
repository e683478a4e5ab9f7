"""Every architecture the release registers, judged as vLLM's runner judges the class it holds.

The registry maps each ``architectures`` name to a module and class; the runner asks
``supports_eagle3`` of that class.  So each registered text-generation architecture is
``native`` (the class's chain declares EAGLE-3), ``patchable`` or ``patched`` (the chain holds a
family's causal LM, whose file ``apply`` patches), or ``refused``, with the reason.  The speculative-config
gate is the second check: a class the runner accepts whose model type the gate refuses is ``gated`` (``apply``
admits it) and ``patched`` once the patched gate admits it.  ``status --architectures`` shows the list beside
the per-file rows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Callable, Optional, Union

from .catalog import FAMILIES
from .codemod.family import FoundWrapper
from .codemod.patch import State
from .discovery import MODEL_TYPES, Discovery, PlatformVariant, model_types
from .drafters.gate import GateVerdict, gate_verdict
from .eagle3.class_chain import Chain
from .eagle3.methods import MethodSupport
from .eagle3.modules import module_of
from .patches.pipeline_relay import carries_aux_across_ranks
from .plan import FilePlan, Plan, least_finished

VERDICTS = ("native", "patched", "patchable", "gated", "refused")


@dataclass(frozen=True)
class Unreadable:
    """The registry names a class this tool cannot read in its module."""

    module: str
    cls: str


@dataclass(frozen=True)
class FamilyFile:
    """A family's causal LM is on the class's chain: its file's state is the verdict."""

    family: str
    file: FilePlan


@dataclass(frozen=True)
class LanguageModel:
    """What a multimodal wrapper hands EAGLE-3 on to."""

    name: Optional[str] = None
    """The language model's class (None: a catalog family's wrapper, named by its family)."""
    family: Optional[str] = None
    """The family that serves it (None: it implements SupportsEagle3 itself, or the checkpoint chooses it)."""
    by_checkpoint: bool = False
    """The checkpoint's text config names it, so it must be an EAGLE-3 target itself."""


@dataclass(frozen=True)
class WrapperFile:
    """A multimodal class served through a wrapper: the wrapper's file's state is the verdict."""

    file: FilePlan
    cls: str
    language_model: LanguageModel


@dataclass(frozen=True)
class Implements:
    """The class's chain declares EAGLE-3 (``holder``: the class that does, where it is another)."""

    cls: str
    holder: Optional[str] = None


@dataclass(frozen=True)
class AnotherFamilysFile:
    """Found by rule, but its file is patched for another family, which does not cover its causal LM."""

    path: str
    causal_lm: str


@dataclass(frozen=True)
class Unserved:
    """No family serves the class (``unrecognised``: what the rule did not find, where it looked)."""

    cls: str
    module: str
    unrecognised: Optional[str] = None
    """Discovery's reason, a free-form string fact: the codemod or the rule names what was not there."""


@dataclass(frozen=True)
class VariantStanding:
    """One platform's class of an architecture picked per platform, and how far along it is."""

    variant: PlatformVariant
    file: Optional[FilePlan] = None
    """The file of the family that patches it (None: native, or refused with ``variant.refusal``)."""

    @property
    def state(self) -> Optional[State]:
        """Its state (None: refused)."""
        if self.variant.native:
            return State.NATIVE
        return self.file.state if self.file is not None else None


@dataclass(frozen=True)
class PerPlatform:
    """A platform-split package picks the class per platform: the classes CUDA imports decide (every one, where no
    variant is CUDA's by its package); the others are named, target or not."""

    cls: str
    module: str
    variants: tuple[VariantStanding, ...]

    @property
    def deciding(self) -> tuple[VariantStanding, ...]:
        return tuple(v for v in self.variants if v.variant.cuda) or self.variants


RunnerReason = Union[Unreadable, FamilyFile, WrapperFile, Implements, AnotherFamilysFile, Unserved, PerPlatform]


class GateSays(enum.Enum):
    """What the speculative-config gate adds to the runner's verdict."""

    REFUSES_UNTIL_APPLY = "refuses until apply"
    REFUSES = "refuses"
    OPENED = "opened"
    """Admits the types only as this tool patched it."""
    CHECKPOINT_DECIDES = "checkpoint decides"
    """The gate checks the text config's model type, which each checkpoint of this multimodal class names (LLaVA's
    may be Llama's, admitted, or another): the runner's verdict stands, on that condition."""


@dataclass(frozen=True)
class GateReason:
    says: GateSays
    types: tuple[str, ...]
    file: FilePlan


@dataclass(frozen=True)
class ArchitectureVerdict:
    architecture: str
    module: str
    cls: str
    verdict: str
    """One of :data:`VERDICTS`."""
    runner: RunnerReason
    """Why the runner judges the class so, as facts (``render/words.py`` words the reason)."""
    family: Optional[str] = None
    over_pipeline_ranks: Optional[bool] = None
    """Whether its decoder carries aux states across pipeline ranks once patched (0.30.0+, model runner V2);
    None where this tool does not write its file (native or refused: ``doctor --target`` reads those)."""
    decoder_only: bool = True
    """False for an encoder-decoder model (Whisper), which EAGLE-3 does not serve."""
    kind: str = "text"
    """``text`` (``_TEXT_GENERATION_MODELS``) or ``multimodal`` (``_MULTIMODAL_MODELS``: a language model behind
    encoders of images, video or audio)."""
    gate: Optional[GateReason] = None
    """What the speculative-config gate adds, where it refuses the types or admits them only as patched."""
    methods: tuple[str, ...] = ()
    """The hidden-state methods vLLM serves it with on this install (``methods.METHODS``, as the release has them):
    every one where both checks pass; where only the gate refuses, those the gate does not check."""


def architecture_verdicts(plan: Plan) -> list[ArchitectureVerdict]:
    """One verdict per registered text-generation architecture, then per multimodal one, in the registry's order."""
    chains = plan.chains
    files = {file.path: file for file in plan.files}
    interface = plan.release.interface
    relays = interface is not None and interface.relay_key is not None
    kinds = (("text", plan.release.text_generation_models), ("multimodal", plan.release.multimodal_models))
    verdicts = []
    for kind, models in kinds:
        for architecture, (module, cls) in models.items():
            chain = chains.registered(module, cls)
            verdict = replace(
                judge(architecture, module, cls, chain, files, plan.discovery, relays),
                kind=kind,
                decoder_only=architecture not in plan.discovery.encoder_decoder,
            )
            types = gate_types(architecture, module, chain, plan.release.registry, kind)
            verdicts.append(
                through_the_gate(verdict, gate_verdict(plan, types)) if types else _checkpoint_decides(verdict, plan)
            )
    return [replace(verdict, methods=served_methods(verdict, plan.release.methods)) for verdict in verdicts]


def gate_types(
    architecture: str, module: str, chain: Optional[Chain], registry: dict[str, tuple[str, str]], kind: str
) -> tuple[str, ...]:
    """The model types the gate sees for the architecture's checkpoints: ``hf_text_config``'s.  A multimodal class
    the table does not name is checked by its language model's: the types of the architectures its ``__init__``
    builds by the registry; () where its checkpoint's text config names that language model (LLaVA's)."""
    if kind == "text" or architecture in MODEL_TYPES or chain is None:
        return model_types(architecture, module)
    built = [architectures for cls in chain.classes for _, architectures in cls.registered]
    if any(not architectures for architectures in built):
        return ()
    named = [a for architectures in built for a in architectures if a in registry]
    types = tuple(dict.fromkeys(t for a in named for t in model_types(a, registry[a][0])))
    return types or model_types(architecture, module)


def _checkpoint_decides(verdict: ArchitectureVerdict, plan: Plan) -> ArchitectureVerdict:
    """Where the release's gate has a whitelist, the checkpoint's text model type decides: ``gated`` while the
    gate is as vLLM installed it (``apply`` widens it to every type this tool serves), ``patched`` once widened."""
    file = next((f for f in plan.files if f.path == plan.release.gate_file), None)
    if verdict.verdict not in ("native", "patched") or file is None or plan.release.gate_admits("\0"):
        return verdict
    reason = GateReason(GateSays.CHECKPOINT_DECIDES, (), file)
    return replace(verdict, verdict="gated" if file.state is State.UNPATCHED else "patched", gate=reason)


def served_methods(verdict: ArchitectureVerdict, methods: tuple[MethodSupport, ...]) -> tuple[str, ...]:
    """What a deployment can run on it: every method where both checks pass, the ungated ones where only the gate
    refuses, none where the runner does (or before ``apply``: a verdict is what this install serves now)."""
    if verdict.verdict in ("native", "patched"):
        return tuple(m.method.name for m in methods)
    if verdict.gate is not None:
        return tuple(m.method.name for m in methods if not m.gated)
    return ()


def through_the_gate(verdict: ArchitectureVerdict, gate: GateVerdict) -> ArchitectureVerdict:
    """The runner's verdict, then the gate's: what a deployment gets is what both let through."""
    if verdict.verdict not in ("native", "patched"):
        return verdict
    if gate.refused and gate.file is not None:
        if gate.apply_opens:
            return replace(
                verdict, verdict="gated", gate=GateReason(GateSays.REFUSES_UNTIL_APPLY, gate.refused, gate.file)
            )
        return replace(verdict, verdict="refused", gate=GateReason(GateSays.REFUSES, gate.refused, gate.file))
    if gate.opened and gate.file is not None and verdict.verdict == "native":
        return replace(verdict, verdict="patched", gate=GateReason(GateSays.OPENED, gate.opened, gate.file))
    return verdict


def judge(
    architecture: str,
    module: str,
    cls: str,
    chain: Optional[Chain],
    files: dict[str, FilePlan],
    discovery: Discovery = Discovery(()),
    relays: bool = False,
) -> ArchitectureVerdict:
    def verdict(kind: str, reason: RunnerReason, family: Optional[str] = None) -> ArchitectureVerdict:
        return ArchitectureVerdict(architecture, module, cls, kind, reason, family)

    if chain is None:
        return verdict("refused", Unreadable(module, cls))
    variants = discovery.per_platform.get(architecture)
    if variants is not None:
        return _per_platform(verdict, PerPlatform(cls, module, _standings(variants, files, discovery)))
    found = discovery.architectures.get(architecture)
    for family in (*FAMILIES, *([found] if found else [])):
        family_module = module_of(family.path)
        if chain.includes(family_module, family.causal_lm) and family.path in files:
            file = files[family.path]
            found_verdict = verdict(_FROM_STATE[file.state], FamilyFile(family.name, file), family.name)
            return replace(found_verdict, over_pipeline_ranks=_over_pipeline_ranks(file, relays))
    wrapped = _through_a_wrapper(files, discovery.wrappers.get(architecture))
    if wrapped is not None:
        family_name, file, language_model = wrapped
        return verdict(_FROM_STATE[file.state], WrapperFile(file, cls, language_model), family_name)
    if chain.declares_eagle3:
        holder = next((c for c in chain.classes if "SupportsEagle3" in {b.rsplit(".", 1)[-1] for b in c.bases}), None)
        where = f"{holder.module}.{holder.name}" if holder and holder.name != cls else None
        return verdict("native", Implements(cls, where))
    if found is not None:  # found by rule, but its file is another family's
        return verdict("refused", AnotherFamilysFile(found.path, found.causal_lm))
    return verdict("refused", Unserved(cls, module, discovery.unrecognised.get(architecture)))


def _standings(
    variants: tuple[PlatformVariant, ...], files: dict[str, FilePlan], discovery: Discovery
) -> tuple[VariantStanding, ...]:
    def file(variant: PlatformVariant) -> Optional[FilePlan]:
        wrapper = discovery.wrappers.get(variant.wrapper) if variant.wrapper else None
        if wrapper is not None:
            return files.get(wrapper.wrapper.path)
        family = discovery.family_of(variant.family, FAMILIES) if variant.family else None
        return files.get(family.path) if family is not None else None

    return tuple(VariantStanding(variant, file(variant)) for variant in variants)


def _per_platform(verdict: Callable[..., ArchitectureVerdict], reason: PerPlatform) -> ArchitectureVerdict:
    """Refused where a deciding class is; else as far along as the least finished of them."""
    states = [v.state for v in reason.deciding]
    if any(state is None for state in states):
        return verdict("refused", reason)
    state = least_finished(s for s in states if s is not None)
    family = next((f.file.family for f in reason.deciding if f.file is not None), None)
    return verdict(_FROM_STATE[state] if state is not None else "refused", reason, family)


def _through_a_wrapper(
    files: dict[str, FilePlan], found: Optional[FoundWrapper]
) -> Optional[tuple[str, FilePlan, LanguageModel]]:
    """``(name, wrapper's file, language model)`` of a multimodal class served through a wrapper found by rule."""
    if found is None or found.wrapper.path not in files:
        return None
    if found.chosen_by_checkpoint:
        language_model = LanguageModel(by_checkpoint=True)
    else:
        family_name = found.family.name if found.family is not None else None
        language_model = LanguageModel(found.language_model, family_name)
    return found.name, files[found.wrapper.path], language_model


def _over_pipeline_ranks(file: FilePlan, relays: bool) -> Optional[bool]:
    """From the file as ``apply`` leaves it; None where that text was not planned (``status`` judges states only)."""
    if file.state not in (State.PATCHED, State.UNPATCHED):
        return None
    if not relays:
        return False
    text = file.current if file.state is State.PATCHED else file.desired
    return None if text is None else carries_aux_across_ranks(text.decode("utf-8", "replace"))


_FROM_STATE = {
    State.NATIVE: "native",
    State.PATCHED: "patched",
    State.UNPATCHED: "patchable",
    State.UNSUPPORTED: "refused",
    State.MODIFIED: "refused",
}
