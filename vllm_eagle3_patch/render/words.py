"""The words of the facts the layers below return: what ``text.py`` prints and ``json_objects.py`` carries
say the same thing because both take their words from here."""

from __future__ import annotations

from typing import Union

from ..architecture_verdicts import (
    AnotherFamilysFile,
    ArchitectureVerdict,
    FamilyFile,
    GateSays,
    Implements,
    LanguageModel,
    PerPlatform,
    RunnerReason,
    Unreadable,
    Unserved,
    WrapperFile,
)
from ..codemod.family import CHECKPOINTS_MODEL
from ..codemod.patch import State
from ..drafters.gate import quoted
from ..drafters.target_model import READY, TargetModel
from ..eagle3.modules import registry_module
from ..plan import FilePlan
from ..verification.checks import Check
from ..verification.verify import Expected, FileCheck
from .plan_words import file_reason


def check_words(check: Union[Check, FileCheck]) -> tuple[str, str]:
    """A check's name and detail: a file's static check says what the file is, and why."""
    if isinstance(check, Check):
        return check.name, check.detail
    file, reason = check.file, file_reason(check.file.because)
    if check.expected is Expected.LEFT_ALONE:
        return f"{file.path} is left alone", f"apply cannot patch it: {reason}"
    detail = reason if check.expected is Expected.MET else f"expected patched or native: {reason}"
    return f"{file.path} is {file.state.value}", detail


def architecture_reason(verdict: ArchitectureVerdict) -> str:
    """Why ``status --architectures`` judges an architecture so: the runner's reason, then the gate's."""
    reason = runner_reason(verdict.runner)
    gate = verdict.gate
    if gate is None:
        return reason
    if gate.says is GateSays.CHECKPOINT_DECIDES:
        until = ", which it lists as vLLM installed it (Llama's among them) and widens with `apply`"
        widened = until if gate.file.state is State.UNPATCHED else ", as vllm-eagle3-patch widened it"
        return (
            f"{reason}; the speculative-config gate ({gate.file.path}) checks the model type of its checkpoint's "
            f"text config{widened} (`status --model DIR` judges one)"
        )
    if gate.says is GateSays.OPENED:
        return f"{reason}; the speculative-config gate admits {quoted(gate.types)} as vllm-eagle3-patch patched it"
    refusal = f"the speculative-config gate ({gate.file.path}) refuses {quoted(gate.types)}"
    if gate.says is GateSays.REFUSES_UNTIL_APPLY:
        return f"{reason}; {refusal} until `apply`"
    return f"{reason}; {refusal}: {file_reason(gate.file.because)}"


def per_platform_reason(reason: PerPlatform) -> str:
    """Each platform's class and where it stands; which of them decide (the ones CUDA imports)."""
    deciding = "the CUDA class decides" if any(v.variant.cuda for v in reason.variants) else "every one decides"
    return f"{registry_module(reason.module)} picks {reason.cls} per platform ({deciding}): " + "; ".join(
        f"{v.variant.path} is {v.state.value if v.state else 'refused'}"
        + (f" ({v.variant.refusal})" if v.variant.refusal else "")
        for v in reason.variants
    )


def runner_reason(reason: RunnerReason) -> str:
    """Why the runner accepts or refuses the class the registry names."""
    if isinstance(reason, Unreadable):
        return f"{registry_module(reason.module)} defines no class {reason.cls} this tool can read"
    if isinstance(reason, FamilyFile):
        return f"{reason.family}: {_file_state(reason.file)}"
    if isinstance(reason, WrapperFile):
        handed_on = _language_model(reason.language_model)
        return f"{_file_state(reason.file)}; {reason.cls} hands EAGLE-3 on to {handed_on}"
    if isinstance(reason, Implements):
        where = f" (from {reason.holder})" if reason.holder else ""
        return f"{reason.cls} implements SupportsEagle3{where}"
    if isinstance(reason, AnotherFamilysFile):
        return f"{reason.path} is patched for another family, which does not cover {reason.causal_lm}"
    if isinstance(reason, PerPlatform):
        return per_platform_reason(reason)
    unserved: Unserved = reason
    lacks = f"{unserved.cls} ({unserved.module}.py) lacks SupportsEagle3"
    return unserved.unrecognised or f"{lacks}, and no model family this tool patches serves it"


def _file_state(file: FilePlan) -> str:
    """``path is state``, and why where the file cannot be patched."""
    why = f": {file_reason(file.because)}" if file.state in (State.UNSUPPORTED, State.MODIFIED) else ""
    return f"{file.path} is {file.state.value}{why}"


def _language_model(language_model: LanguageModel) -> str:
    """What a multimodal class hands EAGLE-3 on to, and why that one can take it."""
    name, family = language_model.name, language_model.family
    if language_model.by_checkpoint:
        return CHECKPOINTS_MODEL + ", which must be an EAGLE-3 target (`status --model DIR` judges one)"
    if name is None:
        return f"its language model ({family})"
    if family is not None:
        return f"its language model, {name} ({family})"
    return f"its language model, {name}, which implements SupportsEagle3"


def target_verdict(model: TargetModel) -> str:
    """Whether this install makes the model a target of the hidden-state methods (``served``), and what it waits for
    where it does not; where it is one, the ids its own decoder cannot capture (0, n), before an engine start fails
    on them."""
    verdict = _target_verdict(model)
    if model.first_layer_trap and model.serves:
        verdict += f"; warning, not layer 0: {first_layer_words(model.first_layer_trap)}"
    if model.last_layer_unreached and model.serves:
        where = model.last_layer_unreached
        verdict += f"; warning, not layer n (the stream leaving the last layer): {last_layer_words(where)}"
    return verdict


def _target_verdict(model: TargetModel) -> str:
    where = f" ({model.module}.py)" if model.module else ""
    if model.unknown is not None:
        return f"{model.architecture}{where}: unknown ({model.unknown})"
    if model.module is None:
        return f"{model.architecture}: not in this vLLM's model registry"
    if model.declares_eagle3:
        if model.gate.admits:
            return f"{model.architecture}{where}: {served(model)} (native: its class has it)"
        why = f"its class implements EAGLE-3, but {gate_refusal(model)}"
        return f"{model.architecture}{where}: not a target yet ({why})"
    if model.wrapper is not None:
        return _wrapper_verdict(model, where)
    if model.refusal is not None:
        return f"{model.architecture}{where}: not a target ({model.refusal})"
    if model.runner is not None:
        return f"{model.architecture}{where}: not a target ({runner_reason(model.runner)})"
    if model.family is None:
        return f"{model.architecture}{where}: not a model family this tool patches"
    if model.ready:
        how = "native" if model.native else "patched"
        return f"{model.architecture}{where}: {served(model)} ({model.family.name}, {how})"
    waiting = [f"{f.path} is {f.state.value}" for f in model.files if f.state not in READY]
    if not model.gate.admits:
        waiting.append(gate_refusal(model))
    return f"{model.architecture}{where}: not a target yet ({', '.join(waiting)})"


def served(model: TargetModel) -> str:
    """``a target on this install for eagle3, extract_hidden_states, dflash``: the methods vLLM serves it with."""
    return "a target on this install for " + (", ".join(model.serves) or "no hidden-state method")


def last_layer_words(where: str) -> str:
    """Why vLLM's own decoder at ``where`` never hands over id n, the stream leaving the last layer."""
    return (
        f"vLLM's decoder captures each id before its layer runs and none after its loop ({where}), "
        "so the engine fails at start"
    )


def first_layer_words(where: str) -> str:
    """Why vLLM's own decoder at ``where`` fails a drafter (or extraction) asking for aux id 0."""
    return f"vLLM's decoder adds the residual, still None at the first layer ({where}), so id 0 fails at engine start"


def gate_refusal(model: TargetModel) -> str:
    """Why the gate stops the model, and what decides (the checkpoint's type, where the name alone cannot)."""
    gate = model.gate
    refusal = f"the speculative-config gate refuses {quoted(gate.refused)}"
    admitted = tuple(t for t in gate.model_types if t not in gate.refused)
    if admitted and not model.from_checkpoint:
        refusal += f" but admits {quoted(admitted)}: its checkpoint's config.json decides"
    return refusal + (" until `apply`" if gate.apply_opens else "")


def _wrapper_verdict(model: TargetModel, where: str) -> str:
    """A multimodal class found by rule: its files, the gate, and the language model the checkpoint names."""
    wrapper = model.wrapper
    assert wrapper is not None
    inner = model.language_model
    if wrapper.chosen_by_checkpoint:
        through = f"its language model, {inner.architecture}" if inner else "the language model its checkpoint names"
    else:
        through = f"its language model, {wrapper.language_model}"
    if model.ready:
        how = f"{wrapper.name} hands it on to {through}"
        return f"{model.architecture}{where}: {served(model)} ({how})"
    waiting = [f"{f.path} is {f.state.value}" for f in model.files if f.state not in READY]
    if not model.gate.admits:
        waiting.append(gate_refusal(model))
    if wrapper.chosen_by_checkpoint and inner is None and not model.from_checkpoint:
        waiting.append("its checkpoint's text config names its language model: give the checkpoint's directory")
    elif wrapper.chosen_by_checkpoint and inner is None:
        waiting.append("its checkpoint's text_config names no architectures, which would be its language model")
    elif inner is not None and not inner.ready:
        waiting.append(target_verdict(inner))
    return f"{model.architecture}{where}: not a target yet ({'; '.join(waiting)})"
