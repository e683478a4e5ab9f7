"""``doctor``: will the vLLM this tool sees feed this drafter the layers it was trained on?

EAGLE-3 fails quietly when the target hands the drafter other layers than it was trained
on: nothing crashes, acceptance drops.  The doctor reads the drafter's and the target's
``config.json`` (and safetensors headers, never weights) and the release's own files, and
says, one line per check, what is consistent, what is not and the command that fixes it;
where the evidence does not decide, it says so instead of guessing.  It returns its findings as data;
``render/`` writes them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..codemod.patch import State
from ..eagle3 import layer_ids
from ..eagle3.class_chain import ChainReader
from ..eagle3.native_ids import native_default
from ..eagle3.release import DRAFTER_IDS_FIELD as FIELD
from ..eagle3.release import GETTERS, REGISTRY, Lookup, Release
from ..patches.pipeline_relay import carries_aux_across_ranks
from ..plan import FilePlan, Plan, least_finished
from .drafter_config import (
    Convention,
    DrafterIds,
    Location,
    ModelConfig,
    drafter_ids,
    infer_convention,
    read_config,
    tensor_shapes,
)
from .target_model import TargetModel, module_path, target_model_of

LLAMA_DRAFTER = "Eagle3LlamaForCausalLM"
NATIVE_MLA_DRAFTERS = "vllm>=0.18.0"


class Assessment(str, enum.Enum):
    OK = "ok"
    PROBLEM = "problem"
    UNKNOWN = "unknown"
    """Not known to be consistent: counts against the exit status like a problem."""
    NOTE = "note"
    """A fact worth knowing that decides nothing."""


class Serving(enum.Enum):
    """What the release finding found decides whether this install serves the target with EAGLE-3."""

    THE_FILES = "the files"
    """An unfinished run, modified files, or files no target can use: the plan's reason says why."""
    NO_TARGET = "no target"
    """No target given: its class and model type decide."""
    THE_TARGET = "the target"
    """The target's verdict, with the reason of a file on its path this tool cannot patch."""
    ITS_OWN_CLASS = "its own class"
    """The release does not register the target: its own model class decides."""


@dataclass(frozen=True)
class ReleaseFacts:
    """The release finding's facts: ``render/words.py`` words them."""

    serving: Serving
    plan: Plan
    model: Optional[TargetModel] = None
    unrecognised: Optional[FilePlan] = None
    """A file on the target's path this tool cannot patch."""


@dataclass(frozen=True)
class Finding:
    check: str
    verdict: Assessment
    detail: Union[str, ReleaseFacts]
    """What was found: text, or the release finding's facts."""
    fix: Optional[str] = None


@dataclass(frozen=True)
class Diagnosis:
    plan: Plan
    drafter: ModelConfig
    target: Optional[ModelConfig]
    findings: tuple[Finding, ...]
    captured: Optional[tuple[int, ...]]
    expected: Optional[tuple[int, ...]]

    @property
    def consistent(self) -> bool:
        return all(f.verdict in (Assessment.OK, Assessment.NOTE) for f in self.findings)


@dataclass(frozen=True)
class Context:
    """Everything the checks read, gathered once."""

    plan: Plan
    release: Release
    drafter: ModelConfig
    target: Optional[ModelConfig]
    ids: DrafterIds
    shapes: dict[str, list[int]]
    command: str
    """The tool's command line up to the subcommand, as the user gave it (``--vllm-dir D``)."""

    @property
    def version(self) -> str:
        return self.plan.install.version

    @property
    def num_layers(self) -> Optional[int]:
        return self.target.number("num_hidden_layers") if self.target else None

    @property
    def model(self) -> Optional[TargetModel]:
        """The target as the runner will hold it on this install (None: no target given)."""
        if self.target is None:
            return None
        return target_model_of(self.plan, self.target.architecture or "", self.target)


def diagnose(plan: Plan, drafter: Path, target: Optional[Path], command: str) -> Diagnosis:
    drafter_config = read_config(drafter, "drafter")
    target_config = read_config(target, "target") if target is not None else None
    context = Context(
        plan=plan,
        release=plan.release,
        drafter=drafter_config,
        target=target_config,
        ids=drafter_ids(drafter_config),
        shapes=tensor_shapes(drafter_config.directory),
        command=command,
    )
    captured, source = captured_layers(context)
    expected = expected_layers(context)
    findings = (
        release_finding(context),
        architecture_finding(context),
        hidden_size_finding(context),
        vocabulary_finding(context),
        draft_vocabulary_finding(context),
        ids_location_finding(context),
        convention_finding(context),
        layers_finding(context, captured, source, expected),
        pipeline_finding(context),
    )
    return Diagnosis(plan, drafter_config, target_config, findings, captured, expected)


# --------------------------------------------------------------------------- the release


def release_finding(context: Context) -> Finding:
    """Whether this install serves the target with EAGLE-3: its class (the runner's check), its files and the gate."""
    plan, command, model = context.plan, context.command, context.model
    the_files = ReleaseFacts(Serving.THE_FILES, plan)
    if plan.state is State.INTERRUPTED:  # a killed apply (or revert): apply finishes it
        return Finding("vLLM", Assessment.PROBLEM, the_files, f"{command} apply")
    if plan.state is State.MODIFIED:
        return Finding("vLLM", Assessment.PROBLEM, the_files, f"{command} revert --force && {command} apply")
    if model is None:
        return Finding(
            "vLLM",
            Assessment.UNKNOWN,
            ReleaseFacts(Serving.NO_TARGET, plan),
            f"{command} doctor --drafter {context.drafter.directory} --target TARGET_DIR",
        )
    unrecognised = next((f for f in model.files if f.state is State.UNSUPPORTED), None)
    the_target = ReleaseFacts(Serving.THE_TARGET, plan, model, unrecognised)
    if model.ready:
        return Finding("vLLM", Assessment.OK, the_target)
    if model.apply_fixes:
        return Finding("vLLM", Assessment.PROBLEM, the_target, f"{command} apply")
    if model.module is None:
        return Finding("vLLM", Assessment.UNKNOWN, ReleaseFacts(Serving.ITS_OWN_CLASS, plan, model, unrecognised))
    if plan.state is State.UNSUPPORTED and unrecognised is None:
        return Finding("vLLM", Assessment.PROBLEM, the_files, f"pip install '{NATIVE_MLA_DRAFTERS}'")
    return Finding("vLLM", Assessment.PROBLEM, the_target, "none from this tool: a newer vLLM, or another target")


def pipeline_finding(context: Context) -> Finding:
    """Whether EAGLE-3 can run over pipeline ranks here: from 0.30.0 model runner V2 carries the aux
    states of earlier ranks for a decoder that declares it; before, vLLM refuses the drafter itself."""
    check, where = "pipeline", f"vLLM {context.version}"
    interface, model = context.release.interface, context.model
    if interface is None or interface.relay_key is None:
        return Finding(
            check,
            Assessment.NOTE,
            f"{where} runs EAGLE-3 on one pipeline stage only: before 0.30.0 it gives the drafter the target's "
            "pipeline size and refuses it (an EAGLE drafter has no SupportsPP); scale with --tensor-parallel-size",
        )
    if model is None:
        return Finding(
            check,
            Assessment.NOTE,
            f"{where} carries aux states across pipeline ranks for targets that "
            "declare it (model runner V2); give --target to learn whether yours does",
        )
    texts = [(f.desired or f.current).decode("utf-8", "replace") for f in model.files if f.family is not None]
    if not texts and model.module:
        texts = [context.release.read(module_path(model.module)) or ""]
    if any(carries_aux_across_ranks(text) for text in texts):
        detail = f"{where}: {model.architecture} carries its aux states across pipeline ranks (model runner V2)"
        return Finding(check, Assessment.OK, detail)
    return Finding(
        check,
        Assessment.NOTE,
        f"{where}: {model.architecture} does not carry aux states across pipeline ranks: serve it with "
        "--pipeline-parallel-size 1 (vLLM refuses EAGLE-3 over ranks for it)",
    )


# --------------------------------------------------------------------------- the drafter's shape


def architecture_finding(context: Context) -> Finding:
    architecture, lookup = context.drafter.architecture, context.release.lookup
    if "speculators_model_type" in context.drafter.data:
        detail = (
            "a speculators-format config: vLLM converts it itself (transformers_utils/configs/speculators); not checked"
        )
        return Finding("architecture", Assessment.UNKNOWN, detail)
    if architecture is None:
        return Finding("architecture", Assessment.UNKNOWN, f"{context.drafter.path}: no architectures list")
    if lookup is None:
        detail = f"vLLM {context.version} loads no EAGLE-3 drafter"
        return Finding("architecture", Assessment.PROBLEM, detail, f"pip install '{NATIVE_MLA_DRAFTERS}'")
    loaded = lookup.looked_up(architecture)
    mla = "Deepseek" in architecture
    if lookup is Lookup.FIXED and not mla:
        return Finding("architecture", Assessment.OK, f"{architecture} loads: vLLM {context.version}: {lookup.value}")
    if loaded in context.release.registered and not (lookup is Lookup.FIXED and mla):
        renamed = f" as {loaded}" if loaded != architecture else ""
        return Finding("architecture", Assessment.OK, f"{architecture} loads{renamed} (registered in {REGISTRY})")
    detail = f"{architecture} cannot load on vLLM {context.version}: {lookup.value}, and {loaded} is not in {REGISTRY}"
    if lookup is Lookup.FIXED:
        detail = f"{architecture} is an MLA drafter, but vLLM {context.version}: {lookup.value}"
    if mla:
        fix = (
            f"pip install '{NATIVE_MLA_DRAFTERS}'  (MLA drafters load from 0.18.0; or use a Llama-architecture drafter)"
        )
    elif "Llama" in architecture and LLAMA_DRAFTER in context.release.registered:
        fix = set_config_command(context.drafter.path, "architectures", [lookup_free_llama(lookup)])
    else:
        fix = f"use a drafter whose architecture vLLM {context.version} registers (e.g. {LLAMA_DRAFTER})"
    return Finding("architecture", Assessment.PROBLEM, detail, fix)


def lookup_free_llama(lookup: Lookup) -> str:
    """The architecture name this release's lookup turns into the registered Llama drafter."""
    return "LlamaForCausalLM" if lookup is not Lookup.FIXED else LLAMA_DRAFTER


def hidden_size_finding(context: Context) -> Finding:
    """The drafter's fc takes the target's hidden states: ``target_hidden_size`` where it has one."""
    key = "target_hidden_size" if context.drafter.number("target_hidden_size") is not None else "hidden_size"
    return same_number_finding(context, "hidden size", key, "hidden_size", "trained for another model")


def vocabulary_finding(context: Context) -> Finding:
    return same_number_finding(context, "vocabulary", "vocab_size", "vocab_size", "another tokenizer")


def same_number_finding(context: Context, check: str, drafter_key: str, target_key: str, why: str) -> Finding:
    """A size the drafter was trained with against the target's."""
    if context.target is None:
        return needs_target(check, context)
    expects, actual = context.drafter.number(drafter_key), context.target.number(target_key)
    if expects is None or actual is None:
        return Finding(
            check, Assessment.UNKNOWN, f"the drafter's {drafter_key} or the target's {target_key} is missing"
        )
    if expects != actual:
        detail = f"the drafter's {drafter_key} is {expects}, the target's {target_key} {actual}: {why}"
        return Finding(check, Assessment.PROBLEM, detail, "use the drafter trained for this target")
    return Finding(check, Assessment.OK, f"{actual} (the drafter's {drafter_key}, the target's {target_key})")


def draft_vocabulary_finding(context: Context) -> Finding:
    vocabulary = context.drafter.number("vocab_size")
    draft = context.drafter.number("draft_vocab_size")
    if draft is None or draft == vocabulary:
        return Finding("draft vocabulary", Assessment.OK, "drafts over the whole vocabulary")
    if vocabulary is not None and draft > vocabulary:
        detail = f"draft_vocab_size {draft} exceeds vocab_size {vocabulary}"
        return Finding("draft vocabulary", Assessment.PROBLEM, detail, "use an intact drafter checkpoint")
    d2t = next((shape for name, shape in context.shapes.items() if name.split(".")[-1] == "d2t"), None)
    if not context.shapes:
        return Finding(
            "draft vocabulary", Assessment.NOTE, f"draft_vocab_size {draft}: no safetensors header to check its d2t map"
        )
    if d2t != [draft]:
        found = "no d2t tensor" if d2t is None else f"a d2t tensor of shape {d2t}"
        detail = f"draft_vocab_size {draft} needs a d2t map of {draft} entries; the checkpoint has {found}"
        return Finding("draft vocabulary", Assessment.PROBLEM, detail, "use an intact drafter checkpoint")
    return Finding("draft vocabulary", Assessment.OK, f"draft_vocab_size {draft} with its d2t map")


def needs_target(check: str, context: Context) -> Finding:
    return Finding(
        check,
        Assessment.UNKNOWN,
        "needs the target's config.json",
        f"{context.command} doctor --drafter {context.drafter.directory} --target TARGET_DIR",
    )


# --------------------------------------------------------------------------- the layer ids


def ids_location_finding(context: Context) -> Finding:
    found, version = context.ids, context.version
    if found.ids is None:
        return Finding("ids", Assessment.NOTE, f"no {FIELD} in the drafter config: the target's ids are used")
    ids = list(found.ids)
    if found.location is Location.EAGLE_CONFIG:
        detail = (
            f"eagle_config.{FIELD} {ids}: vLLM {version} ignores ids nested under eagle_config (it reads the top level)"
        )
    elif context.release.reads_drafter_ids:
        detail = f"{FIELD} {ids} at the top level: vLLM {version} reads them instead of the target's"
    else:
        detail = f"{FIELD} {ids} at the top level: vLLM {version} ignores them (read from 0.11.1 on)"
    return Finding("ids", Assessment.NOTE, detail)


def convention_finding(context: Context) -> Finding:
    if context.ids.ids is None:
        detail = "no ids: assuming the default of EAGLE-3 and SpecForge training, vLLM's (2, n // 2, n - 3)"
        return Finding("convention", Assessment.NOTE, detail)
    inference = infer_convention(context.ids, context.num_layers)
    if inference.convention is None:
        fix = (
            f"{context.command} apply --aux-layers-from {context.drafter.directory} --ids-convention sglang"
            "  (or vllm: as it was trained)"
        )
        return Finding("convention", Assessment.UNKNOWN, f"cannot tell: {inference.reason}", fix)
    return Finding("convention", Assessment.OK, f"{inference.convention.value}: {inference.reason}")


def captured_layers(context: Context) -> tuple[Optional[tuple[int, ...]], str]:
    """The ids vLLM will capture with this install, and where they come from."""
    plan, n, found = context.plan, context.num_layers, context.ids
    if context.release.reads_drafter_ids and found.location is Location.TOP_LEVEL:
        return found.ids, f"the drafter's top-level ids, which vLLM {context.version} reads"
    if n is None:
        return None, "needs the target's num_hidden_layers"
    model = context.model
    if model is None:
        return None, "needs the target's config.json"
    if model.wrapper is not None:
        model = _held_language_model(context, model)
    if model.declares_eagle3 or (model.family is not None and _model_state(model) is State.NATIVE):
        return native_layers(context, model, n)
    if model.family is None:
        return None, "the target is not a model family this tool patches, and its class lacks EAGLE-3"
    state = _model_state(model)
    if state is State.PATCHED and plan.options.aux_layers is not None:
        return plan.options.aux_layers, "baked in by apply --aux-layers"
    if state is State.PATCHED:
        return layer_ids.patched_default(n), "the patched default"
    if state is State.UNPATCHED:
        return layer_ids.patched_default(n), "the patched default, once applied"
    return None, f"vLLM {context.version} is {plan.state.value}"


def _held_language_model(context: Context, wrapper: TargetModel) -> TargetModel:
    """The model whose getter the multimodal class found by rule hands the runner on to: the language model the
    checkpoint names, a native one by its class (its own getter), else the wrapper itself (the patched default, as
    a family's causal LM or a bare decoder gets it)."""
    found = wrapper.wrapper
    if wrapper.language_model is not None:
        return wrapper.language_model
    if found is not None and found.family is None and not found.bare and not found.chosen_by_checkpoint:
        if found.language_model in context.release.registry:
            return target_model_of(context.plan, found.language_model, None)
    return wrapper


def native_layers(context: Context, model: TargetModel, n: int) -> tuple[Optional[tuple[int, ...]], str]:
    """The ids the target's own class returns by default, read from its getter (``llama.py``'s, for Mistral)."""
    entry = context.release.registry.get(model.architecture)
    chain = ChainReader(context.release.read).registered(*entry) if entry else None
    interface = context.release.interface
    getters = (interface.getter,) if interface is not None else GETTERS
    default = native_default(chain, context.release.read, getters) if chain is not None else None
    if default is None:
        return None, f"{model.architecture}'s own class chooses, by a getter this tool cannot read"
    ids = default.ids(n)
    if ids is None:
        return None, f"vLLM's own default, {default.text} in {default.where}, which this tool cannot evaluate"
    return ids, f"vLLM's own default, {default.text} in {default.where}"


def _model_state(model: TargetModel) -> State:
    """The least finished of the model files on the model's path (native where all are; none: unsupported)."""
    return least_finished(f.state for f in model.files if f.family is not None) or State.UNSUPPORTED


def expected_layers(context: Context) -> Optional[tuple[int, ...]]:
    """The vLLM ids the drafter was trained on (None: unknown)."""
    found, n = context.ids, context.num_layers
    if found.ids is None:  # trained on the common default, which is no default where it repeats ids
        return layer_ids.upstream_default(n) if n is not None and n >= layer_ids.SMALLEST_DISTINCT_DEFAULT else None
    convention = infer_convention(found, n).convention
    return convention.to_vllm(found.ids) if convention is not None else None


def layers_finding(
    context: Context, captured: Optional[tuple[int, ...]], source: str, expected: Optional[tuple[int, ...]]
) -> Finding:
    n = context.num_layers
    if captured is None:
        return Finding("layers", Assessment.UNKNOWN, f"cannot tell what vLLM will capture: {source}")
    will = f"vLLM will capture {list(captured)} ({source})"
    if n is not None and any(i > n for i in captured):
        fix = fix_layers(context, source, expected) if expected else None
        return Finding("layers", Assessment.PROBLEM, f"{will}, but the target has only {n} layers (ids 0..{n})", fix)
    fc_states = aux_state_count(context)
    if fc_states is not None and fc_states != len(captured):
        detail = f"{will}, but the drafter's fc takes {fc_states} hidden states"
        return Finding(
            "layers", Assessment.PROBLEM, detail, fix_layers(context, source, expected) if expected else None
        )
    if expected is None and context.ids.ids is None:
        detail = f"{will}; the drafter names no ids and (2, n // 2, n - 3) repeats ids for {n} layers: undecided"
        return Finding("layers", Assessment.UNKNOWN, detail)
    if expected is None:
        raw = context.ids.ids or ()
        candidates = f"{list(raw)} (vllm) or {list(Convention.SGLANG.to_vllm(raw))} (sglang)"
        return Finding("layers", Assessment.UNKNOWN, f"{will}; the drafter expects {candidates}, undecided")
    if captured != expected:
        detail = f"{will}; the drafter was trained on {list(expected)}"
        return Finding("layers", Assessment.PROBLEM, detail, fix_layers(context, source, expected))
    return Finding("layers", Assessment.OK, f"{will}; the drafter was trained on the same")


def fix_layers(context: Context, source: str, expected: tuple[int, ...]) -> str:
    """Drafter ids vLLM reads can only be corrected in the drafter's config; others by ``apply``."""
    if source.startswith("the drafter's top-level ids"):
        return set_config_command(context.drafter.path, FIELD, list(expected))
    return f"{context.command} apply --aux-layers {','.join(map(str, expected))}"


def aux_state_count(context: Context) -> Optional[int]:
    """How many target hidden states the drafter's fc concatenates, from its weight's shape."""
    hidden = context.target.number("hidden_size") if context.target else None
    shape = next((s for name, s in context.shapes.items() if name.endswith("fc.weight")), None)
    if hidden is None or shape is None or len(shape) != 2 or shape[1] % hidden:
        return None
    return shape[1] // hidden


def set_config_command(path: Path, key: str, value: Any) -> str:
    """A command that sets one top-level key of a config.json (no jq needed)."""
    program = (
        f"import json, pathlib; p = pathlib.Path({str(path)!r}); c = json.loads(p.read_text()); "
        f"c[{key!r}] = {value!r}; p.write_text(json.dumps(c, indent=2))"
    )
    return f'python3 -c "{program}"'
