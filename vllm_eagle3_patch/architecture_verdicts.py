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

from dataclasses import dataclass, replace
from typing import Optional

from .catalog import FAMILIES
from .codemod.family import CHECKPOINTS_MODEL, FoundWrapper
from .codemod.patch import State
from .discovery import Discovery, model_types
from .drafters.gate import GateVerdict, gate_verdict, quoted
from .eagle3.class_chain import Chain, ChainReader, registry_module
from .patches.pipeline_relay import carries_aux_across_ranks
from .plan import FilePlan, Plan

VERDICTS = ("native", "patched", "patchable", "gated", "refused")


@dataclass(frozen=True)
class ArchitectureVerdict:
    architecture: str
    module: str
    cls: str
    verdict: str
    """One of :data:`VERDICTS`."""
    reason: str
    family: Optional[str] = None
    over_pipeline_ranks: Optional[bool] = None
    """Whether its decoder carries aux states across pipeline ranks once patched (0.30.0+, model runner V2);
    None where this tool does not write its file (native or refused: ``doctor --target`` reads those)."""
    decoder_only: bool = True
    """False for an encoder-decoder model (Whisper), which EAGLE-3 does not serve."""
    kind: str = "text"
    """``text`` (``_TEXT_GENERATION_MODELS``) or ``multimodal`` (``_MULTIMODAL_MODELS``: a language model behind
    encoders of images, video or audio)."""


def architecture_verdicts(plan: Plan) -> list[ArchitectureVerdict]:
    """One verdict per registered text-generation architecture, then per multimodal one, in the registry's order."""
    chains = ChainReader(plan.release.read)
    files = {file.path: file for file in plan.files}
    interface = plan.release.interface
    relays = interface is not None and interface.relay_key is not None
    kinds = (("text", plan.release.text_generation_models), ("multimodal", plan.release.multimodal_models))
    return [
        through_the_gate(
            replace(
                judge(architecture, module, cls, chains.registered(module, cls), files, plan.discovery, relays),
                kind=kind,
                decoder_only=architecture not in plan.discovery.encoder_decoder,
            ),
            gate_verdict(plan, model_types(architecture, module)),
        )
        for kind, models in kinds
        for architecture, (module, cls) in models.items()
    ]


def through_the_gate(verdict: ArchitectureVerdict, gate: GateVerdict) -> ArchitectureVerdict:
    """The runner's verdict, then the gate's: what a deployment gets is what both let through."""
    if verdict.verdict not in ("native", "patched"):
        return verdict
    if gate.refused and gate.file is not None:
        refusal = f"the speculative-config gate ({gate.file.path}) refuses {quoted(gate.refused)}"
        if gate.apply_opens:
            return replace(verdict, verdict="gated", reason=f"{verdict.reason}; {refusal} until `apply`")
        return replace(verdict, verdict="refused", reason=f"{verdict.reason}; {refusal}: {gate.file.reason}")
    if gate.opened and verdict.verdict == "native":
        opened = f"; the speculative-config gate admits {quoted(gate.opened)} as vllm-eagle3-patch patched it"
        return replace(verdict, verdict="patched", reason=verdict.reason + opened)
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
    def verdict(kind: str, reason: str, family: Optional[str] = None) -> ArchitectureVerdict:
        return ArchitectureVerdict(architecture, module, cls, kind, reason, family)

    if chain is None:
        return verdict("refused", f"{registry_module(module)} defines no class {cls} this tool can read")
    found = discovery.architectures.get(architecture)
    for family in (*FAMILIES, *([found] if found else [])):
        family_module = family.path.removesuffix(".py").replace("/", ".")
        if chain.includes(family_module, family.causal_lm) and family.path in files:
            file = files[family.path]
            why = f": {file.reason}" if file.state in (State.UNSUPPORTED, State.MODIFIED) else ""
            found_verdict = verdict(
                _FROM_STATE[file.state], f"{family.name}: {file.path} is {file.state.value}{why}", family.name
            )
            return replace(found_verdict, over_pipeline_ranks=_over_pipeline_ranks(file, relays))
    wrapped = _through_a_wrapper(chain, files, discovery.wrappers.get(architecture))
    if wrapped is not None:
        family_name, file, language_model = wrapped
        why = f": {file.reason}" if file.state in (State.UNSUPPORTED, State.MODIFIED) else ""
        return verdict(
            _FROM_STATE[file.state],
            f"{file.path} is {file.state.value}{why}; {cls} hands EAGLE-3 on to {language_model}",
            family_name,
        )
    if chain.declares_eagle3:
        holder = next((c for c in chain.classes if "SupportsEagle3" in {b.rsplit(".", 1)[-1] for b in c.bases}), None)
        where = f" (from {holder.module}.{holder.name})" if holder and holder.name != cls else ""
        return verdict("native", f"{cls} implements SupportsEagle3{where}")
    if found is not None:  # found by rule, but its file is another family's
        return verdict("refused", f"{found.path} is patched for another family, which does not cover {found.causal_lm}")
    return verdict(
        "refused",
        discovery.unrecognised.get(architecture)
        or f"{cls} ({module}.py) lacks SupportsEagle3, and no model family this tool patches serves it",
    )


def _through_a_wrapper(
    chain: Chain, files: dict[str, FilePlan], found: Optional[FoundWrapper]
) -> Optional[tuple[str, FilePlan, str]]:
    """``(family, wrapper's file, language model)`` of a multimodal class served through a wrapper: a catalog
    family's (Gemma 3's, Kimi-K2.5's) or one found by rule."""
    for family in FAMILIES:
        wrapper = family.wrapper
        if wrapper is not None and chain.includes(_module(wrapper.path), wrapper.cls) and wrapper.path in files:
            return family.name, files[wrapper.path], f"its language model ({family.name})"
    if found is None or found.wrapper.path not in files:
        return None
    if found.chosen_by_checkpoint:
        language_model = CHECKPOINTS_MODEL + ", which must be an EAGLE-3 target (`status --model DIR` judges one)"
    elif found.family is not None:
        language_model = f"its language model, {found.language_model} ({found.family.name})"
    else:
        language_model = f"its language model, {found.language_model}, which implements SupportsEagle3"
    return found.name, files[found.wrapper.path], language_model


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


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
