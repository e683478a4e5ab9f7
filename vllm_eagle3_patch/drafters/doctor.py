"""``doctor``: will the vLLM this tool sees feed this drafter the layers it was trained on?

EAGLE-3 fails quietly when the target hands the drafter other layers than it was trained
on: nothing crashes, acceptance drops.  The doctor reads the drafter's and the target's
``config.json`` (and safetensors headers, never weights) and the release's own files, and
says, one line per check, what is consistent, what is not and the command that fixes it;
where the evidence does not decide, it says so instead of guessing.  It returns its findings as facts
(``doctor_facts.py``); ``render/doctor_words.py`` words them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ..codemod.patch import State
from ..eagle3 import layer_ids
from ..eagle3.drafter_id_fields import read_ids
from ..eagle3.methods import EAGLE3, EXTRACT_HIDDEN_STATES, Method, drafter_method
from ..eagle3.native_ids import native_default
from ..eagle3.release import DRAFTER_IDS_FIELD as FIELD
from ..eagle3.release import GETTERS, GpuDefault, Lookup, Release
from ..errors import ToolError
from ..patches.pipeline_relay import carries_aux_across_ranks
from ..plan import Plan, least_finished
from .doctor_facts import (
    LLAMA_DRAFTER,
    ApplyAuxLayers,
    ArchitectureFacts,
    Assessment,
    Capture,
    CaptureSource,
    Carrying,
    CheckName,
    ConventionFacts,
    DraftMap,
    DraftVocabularyFacts,
    Finding,
    IdsFacts,
    LayersFacts,
    LayersFound,
    Loading,
    NeedsTarget,
    PipelineFacts,
    ReleaseFacts,
    Remedy,
    RunnerRead,
    Serving,
    SetDrafterConfig,
    SizeFacts,
    Sizes,
)
from .drafter_config import (
    Convention,
    DrafterIds,
    Inference,
    Location,
    ModelConfig,
    drafter_ids,
    infer_convention,
    read_config,
    tensor_shapes,
)
from .speculators_format import as_vllm_loads
from .target_model import TargetModel, checkpoint_architecture, module_path, target_model_of


@dataclass(frozen=True)
class Diagnosis:
    plan: Plan
    drafter: Optional[ModelConfig]
    """None: ``doctor --target`` alone, for ``extract_hidden_states``."""
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
    method: Method = EAGLE3
    """The method the drafter is for (``methods.drafter_method``); ``extract_hidden_states`` without one."""

    @property
    def num_layers(self) -> Optional[int]:
        return self.target.number("num_hidden_layers") if self.target else None

    @property
    def model(self) -> Optional[TargetModel]:
        """The target as the runner will hold it on this install (None: no target given)."""
        if self.target is None:
            return None
        return target_model_of(self.plan, checkpoint_architecture(self.release, self.target), self.target)


def diagnose(
    plan: Plan, drafter: Optional[Path], target: Optional[Path], layers: Optional[tuple[int, ...]] = None
) -> Diagnosis:
    """The drafter against the target and this install; without a drafter, what ``extract_hidden_states`` will save
    of the target (``layers``: the ids a deployment asks for, else the target's default)."""
    target_config = read_config(target, "target") if target is not None else None
    if drafter is None:
        return diagnose_extraction(plan, target_config, layers)
    drafter_config = as_vllm_loads(read_config(drafter, "drafter"), plan.release)
    method = drafter_method(drafter_config.data)
    context = Context(
        plan=plan,
        release=plan.release,
        drafter=drafter_config,
        target=target_config,
        ids=drafter_ids(drafter_config, method),
        shapes=tensor_shapes(drafter_config.directory),
        method=method,
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


EXTRACTION_CONFIG = "speculative_config.draft_model_config.hf_config"
"""Where ``extract_hidden_states`` takes its ids from: the dict a deployment passes stands in for a drafter's config."""


def diagnose_extraction(plan: Plan, target: Optional[ModelConfig], layers: Optional[tuple[int, ...]]) -> Diagnosis:
    """``extract_hidden_states`` has no drafter: the runner reads ids from the ``hf_config`` the deployment gives
    (``layers``) as it reads a drafter's, else asks the target; so the same checks answer which layers it saves."""
    given = ModelConfig(Path(EXTRACTION_CONFIG), {FIELD: list(layers)} if layers is not None else {})
    ids = DrafterIds(Location.TOP_LEVEL, layers) if layers is not None else DrafterIds(Location.ABSENT)
    context = Context(plan, plan.release, given, target, ids, {}, EXTRACT_HIDDEN_STATES)
    captured, source = captured_layers(context)
    findings = (release_finding(context), saved_finding(context, captured, source))
    return Diagnosis(plan, None, target, findings, captured, None)


def saved_finding(context: Context, captured: Optional[tuple[int, ...]], source: CaptureSource) -> Finding:
    """The layers ``extract_hidden_states`` will save, and whether the target's decoder can capture each."""
    check, n = CheckName.LAYERS, context.num_layers
    if captured is None:
        return Finding(check, Assessment.UNKNOWN, LayersFacts(LayersFound.CAPTURE_UNKNOWN, source))
    if n is not None and any(i > n for i in captured):
        facts = LayersFacts(LayersFound.BEYOND_THE_TARGET, source, captured, layers=n)
        return Finding(check, Assessment.PROBLEM, facts)
    trap, unreached = _first_layer_trap(context, captured), _last_layer_unreached(context, captured)
    facts = LayersFacts(LayersFound.SAVED, source, captured, layers=n, trap=trap or unreached, last_layer=not trap)
    fix = Remedy.NOT_LAYER_ZERO if trap else Remedy.NOT_LAYER_N if unreached else None
    return Finding(check, Assessment.PROBLEM if fix else Assessment.OK, facts, fix)


def _first_layer_trap(context: Context, captured: tuple[int, ...]) -> Optional[str]:
    """Where the target's decoder, vLLM's own, fails at id 0, if ``captured`` asks for it."""
    model = context.model
    return model.first_layer_trap if model is not None and 0 in captured else None


def _last_layer_unreached(context: Context, captured: tuple[int, ...]) -> Optional[str]:
    """Where the target's decoder, vLLM's own, never reaches id n, if ``captured`` asks for it."""
    model, n = context.model, context.num_layers
    return model.last_layer_unreached if model is not None and n is not None and n in captured else None


# --------------------------------------------------------------------------- the release


def release_finding(context: Context) -> Finding:
    """Whether this install serves the target with EAGLE-3: its class (the runner's check), its files and the gate."""
    plan, model, check = context.plan, context.model, CheckName.RELEASE
    the_files = ReleaseFacts(Serving.THE_FILES, plan)
    if plan.state is State.INTERRUPTED:  # a killed apply (or revert): apply finishes it
        return Finding(check, Assessment.PROBLEM, the_files, Remedy.APPLY)
    if plan.state is State.MODIFIED:
        return Finding(check, Assessment.PROBLEM, the_files, Remedy.REVERT_THEN_APPLY)
    if model is None:
        return Finding(check, Assessment.UNKNOWN, ReleaseFacts(Serving.NO_TARGET, plan), Remedy.GIVE_THE_TARGET)
    unrecognised = next((f for f in model.files if f.state is State.UNSUPPORTED), None)
    the_target = ReleaseFacts(Serving.THE_TARGET, plan, model, unrecognised)
    if model.ready:
        return Finding(check, Assessment.OK, the_target)
    if model.apply_fixes:
        return Finding(check, Assessment.PROBLEM, the_target, Remedy.APPLY)
    if model.module is None:
        return Finding(check, Assessment.UNKNOWN, ReleaseFacts(Serving.ITS_OWN_CLASS, plan, model, unrecognised))
    if plan.state is State.UNSUPPORTED and unrecognised is None:
        return Finding(check, Assessment.PROBLEM, the_files, Remedy.UPGRADE_VLLM)
    return Finding(check, Assessment.PROBLEM, the_target, Remedy.NONE_FROM_THIS_TOOL)


def pipeline_finding(context: Context) -> Finding:
    """Whether EAGLE-3 can run over pipeline ranks here: from 0.30.0 model runner V2 carries the aux
    states of earlier ranks for a decoder that declares it; before, vLLM refuses the drafter itself."""
    check, interface, model = CheckName.PIPELINE, context.release.interface, context.model
    if interface is None or interface.relay_key is None:
        return Finding(check, Assessment.NOTE, PipelineFacts(Carrying.ONE_STAGE))
    if model is None:
        return Finding(check, Assessment.NOTE, PipelineFacts(Carrying.ASK_THE_TARGET))
    texts = [(f.desired or f.current).decode("utf-8", "replace") for f in model.files if f.family is not None]
    if not texts and model.module:
        texts = [context.release.read(module_path(model.module)) or ""]
    if any(carries_aux_across_ranks(text) for text in texts):
        return Finding(check, Assessment.OK, PipelineFacts(Carrying.CARRIED, model.architecture))
    return Finding(check, Assessment.NOTE, PipelineFacts(Carrying.NOT_CARRIED, model.architecture))


# --------------------------------------------------------------------------- the drafter's shape


def architecture_finding(context: Context) -> Finding:
    architecture, lookup, check = context.drafter.architecture, context.release.lookup, CheckName.ARCHITECTURE
    if "speculators_model_type" in context.drafter.data:
        return Finding(check, Assessment.UNKNOWN, ArchitectureFacts(Loading.SPECULATORS_FORMAT))
    if architecture is None:
        return Finding(check, Assessment.UNKNOWN, ArchitectureFacts(Loading.NO_ARCHITECTURES))
    if context.method is not EAGLE3:
        return method_drafter_finding(context, architecture)
    if lookup is None:
        return Finding(check, Assessment.PROBLEM, ArchitectureFacts(Loading.NO_EAGLE3_DRAFTER), Remedy.UPGRADE_VLLM)
    loaded = lookup.looked_up(architecture)
    mla = "Deepseek" in architecture
    if lookup is Lookup.FIXED and not mla:
        return Finding(check, Assessment.OK, ArchitectureFacts(Loading.FIXED, architecture, loaded, lookup))
    if loaded in context.release.registered and not (lookup is Lookup.FIXED and mla):
        return Finding(check, Assessment.OK, ArchitectureFacts(Loading.REGISTERED, architecture, loaded, lookup))
    loading = Loading.MLA_ON_FIXED if lookup is Lookup.FIXED else Loading.NOT_REGISTERED
    facts = ArchitectureFacts(loading, architecture, loaded, lookup)
    if mla:
        return Finding(check, Assessment.PROBLEM, facts, Remedy.UPGRADE_FOR_MLA_DRAFTER)
    if "Llama" in architecture and LLAMA_DRAFTER in context.release.registered:
        fix = SetDrafterConfig(context.drafter.path, "architectures", [lookup_free_llama(lookup)])
        return Finding(check, Assessment.PROBLEM, facts, fix)
    return Finding(check, Assessment.PROBLEM, facts, Remedy.REGISTERED_DRAFTER)


def method_drafter_finding(context: Context, architecture: str) -> Finding:
    """A DFlash or DSpark drafter: the release must have the method, and register the class (as named, or with the
    method's prefix its ``EAGLEConfig`` adds: ``DFlash{X}``)."""
    method, check = context.method, CheckName.ARCHITECTURE
    if method.name not in {m.method.name for m in context.release.methods}:
        facts = ArchitectureFacts(Loading.NO_SUCH_METHOD, architecture, method=method)
        return Finding(check, Assessment.PROBLEM, facts, Remedy.NEWER_VLLM_FOR_METHOD)
    names = (architecture, *(f"{sign}{architecture}" for sign in method.drafter_signs if sign[0].isupper()))
    loaded = next((name for name in names if name in context.release.registered), None)
    if loaded is None:
        facts = ArchitectureFacts(Loading.NOT_REGISTERED, architecture, architecture, method=method)
        return Finding(check, Assessment.PROBLEM, facts, Remedy.REGISTERED_DRAFTER)
    return Finding(check, Assessment.OK, ArchitectureFacts(Loading.REGISTERED, architecture, loaded, method=method))


def lookup_free_llama(lookup: Lookup) -> str:
    """The architecture name this release's lookup turns into the registered Llama drafter."""
    return "LlamaForCausalLM" if lookup is not Lookup.FIXED else LLAMA_DRAFTER


def hidden_size_finding(context: Context) -> Finding:
    """The drafter's fc takes the target's hidden states: ``target_hidden_size`` where it has one."""
    key = "target_hidden_size" if context.drafter.number("target_hidden_size") is not None else "hidden_size"
    return same_number_finding(context, CheckName.HIDDEN_SIZE, key, "hidden_size")


def vocabulary_finding(context: Context) -> Finding:
    return same_number_finding(context, CheckName.VOCABULARY, "vocab_size", "vocab_size")


def same_number_finding(context: Context, check: CheckName, drafter_key: str, target_key: str) -> Finding:
    """A size the drafter was trained with against the target's."""
    if context.target is None:
        return needs_target(check)
    expects, actual = context.drafter.number(drafter_key), context.target.number(target_key)
    if expects is None or actual is None:
        return Finding(check, Assessment.UNKNOWN, SizeFacts(Sizes.MISSING, drafter_key, target_key))
    facts = SizeFacts(Sizes.DIFFER if expects != actual else Sizes.SAME, drafter_key, target_key, expects, actual)
    if expects != actual:
        return Finding(check, Assessment.PROBLEM, facts, Remedy.TRAINED_DRAFTER)
    return Finding(check, Assessment.OK, facts)


def draft_vocabulary_finding(context: Context) -> Finding:
    check = CheckName.DRAFT_VOCABULARY
    vocabulary = context.drafter.number("vocab_size")
    draft = context.drafter.number("draft_vocab_size")
    if draft is None or draft == vocabulary:
        return Finding(check, Assessment.OK, DraftVocabularyFacts(DraftMap.WHOLE_VOCABULARY))
    if vocabulary is not None and draft > vocabulary:
        facts = DraftVocabularyFacts(DraftMap.EXCEEDS_VOCABULARY, draft, vocabulary)
        return Finding(check, Assessment.PROBLEM, facts, Remedy.INTACT_CHECKPOINT)
    d2t = next((shape for name, shape in context.shapes.items() if name.split(".")[-1] == "d2t"), None)
    if not context.shapes:
        return Finding(check, Assessment.NOTE, DraftVocabularyFacts(DraftMap.UNCHECKED, draft))
    if d2t != [draft]:
        facts = DraftVocabularyFacts(DraftMap.NO_MAP, draft, vocabulary, d2t)
        return Finding(check, Assessment.PROBLEM, facts, Remedy.INTACT_CHECKPOINT)
    return Finding(check, Assessment.OK, DraftVocabularyFacts(DraftMap.MAPPED, draft))


def needs_target(check: CheckName) -> Finding:
    return Finding(check, Assessment.UNKNOWN, NeedsTarget(), Remedy.GIVE_THE_TARGET)


# --------------------------------------------------------------------------- the layer ids


def runner_reads(context: Context) -> tuple[RunnerRead, ...]:
    """What each GPU runner of the release takes from the drafter's config, read from its own code, and which of them
    a GPU user gets for the target by default (``Release.gpu_runner``)."""
    release = context.release
    architecture = checkpoint_architecture(release, context.target) if context.target is not None else None
    default = release.gpu_runner(architecture or "") if architecture or release.gpu_default is GpuDefault.ONLY else None
    return tuple(
        RunnerRead(
            path,
            read_ids(fields, context.drafter.data) if fields is not None else None,
            fields is not None,
            path == default,
        )
        for path, fields in release.drafter_id_fields.items()
    )


def refuse_if_a_runner_reads_other_ids(release: Release, drafter: Path, ids: tuple[int, ...]) -> None:
    """``apply --aux-layers-from``: the ids go into the patched getter, which a runner that finds ids in the drafter's
    config never asks.  Where one finds other layers there than ``ids``, writing them would change nothing it uses:
    the drafter's config is what to fix (``doctor`` gives the command)."""
    config = read_config(drafter, "drafter")
    for path, fields in release.drafter_id_fields.items():
        read = read_ids(fields, config.data) if fields else None
        if read is not None and read.used != ids:
            raise ToolError(
                f"{config.path}: this vLLM's runner {path} reads the drafter's {read.field.name} "
                f"{list(read.written)} itself (layers {list(read.used) if read.used else 'it shifts'}), not the "
                f"ids apply would write ({', '.join(map(str, ids))}); fix the drafter's config instead "
                "(`vllm-eagle3-patch doctor --drafter DIR --target DIR` gives the command). Nothing was changed"
            )


def deciding(reads: tuple[RunnerRead, ...]) -> tuple[RunnerRead, ...]:
    """The runner a GPU user gets, else every runner (they decide together where they agree)."""
    return tuple(r for r in reads if r.default) or reads


def ids_location_finding(context: Context) -> Finding:
    reads = runner_reads(context)
    read = bool(reads) and all(r.read is not None for r in deciding(reads))
    facts = IdsFacts(context.ids, read, reads, context.release.gpu_default)
    return Finding(CheckName.IDS, Assessment.NOTE, facts)


def convention_finding(context: Context) -> Finding:
    check = CheckName.CONVENTION
    if context.ids.ids is None:
        return Finding(check, Assessment.NOTE, ConventionFacts(None))
    if context.ids.location is Location.METHOD_FIELD:  # the field says its convention: no evidence to weigh
        if context.ids.plus:
            why = f"{context.ids.field} names the layer whose output the drafter reads: vLLM's id is one higher"
            return Finding(check, Assessment.OK, ConventionFacts(Inference(Convention.SGLANG, why)))
        why = f"{context.ids.field} holds vLLM's own ids"
        return Finding(check, Assessment.OK, ConventionFacts(Inference(Convention.VLLM, why)))
    inference = infer_convention(context.ids, context.num_layers)
    if inference.convention is None:
        return Finding(check, Assessment.UNKNOWN, ConventionFacts(inference), Remedy.CHOOSE_CONVENTION)
    return Finding(check, Assessment.OK, ConventionFacts(inference))


def captured_layers(context: Context) -> tuple[Optional[tuple[int, ...]], CaptureSource]:
    """The ids vLLM will capture with this install, and where they come from."""
    plan, n = context.plan, context.num_layers
    reads = deciding(runner_reads(context))
    if len({r.used for r in reads}) > 1:  # two runners, other layers, and no telling which serves
        return None, CaptureSource(Capture.RUNNERS_DIFFER, runners=reads)
    if reads and not reads[0].readable and context.ids.location is Location.TOP_LEVEL:
        return context.ids.ids, CaptureSource(Capture.DRAFTER_TOP_LEVEL)  # every release reads the top level first
    if reads and reads[0].read is not None:
        return reads[0].read.used, CaptureSource(Capture.DRAFTER_TOP_LEVEL, read=reads[0])
    if n is None:
        return None, CaptureSource(Capture.NO_LAYER_COUNT)
    model = context.model
    if model is None:
        return None, CaptureSource(Capture.NO_TARGET_CONFIG)
    if model.wrapper is not None:
        model = _held_language_model(context, model)
    if model.declares_eagle3 or (model.family is not None and _model_state(model) is State.NATIVE):
        return native_layers(context, model, n)
    if model.family is None:
        return None, CaptureSource(Capture.NOT_A_FAMILY)
    state = _model_state(model)
    if state is State.PATCHED and plan.options.aux_layers is not None:
        return plan.options.aux_layers, CaptureSource(Capture.BAKED_IN)
    if state is State.PATCHED:
        return layer_ids.patched_default(n), CaptureSource(Capture.PATCHED_DEFAULT)
    if state is State.UNPATCHED:
        return layer_ids.patched_default(n), CaptureSource(Capture.PATCHED_DEFAULT_ONCE_APPLIED)
    return None, CaptureSource(Capture.INSTALL_STATE)


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


def native_layers(context: Context, model: TargetModel, n: int) -> tuple[Optional[tuple[int, ...]], CaptureSource]:
    """The ids the target's own class returns by default, read from its getter (``llama.py``'s, for Mistral)."""
    entry = context.release.registry.get(model.architecture)
    chain = context.plan.chains.registered(*entry) if entry else None
    interface = context.release.interface
    getters = (interface.getter,) if interface is not None else GETTERS
    default = native_default(chain, context.release.read, getters) if chain is not None else None
    if default is None:
        return None, CaptureSource(Capture.UNREADABLE_GETTER, architecture=model.architecture)
    ids = default.ids(n)
    if ids is None:
        return None, CaptureSource(Capture.UNEVALUATED_DEFAULT, default=default)
    return ids, CaptureSource(Capture.OWN_DEFAULT, default=default)


def _model_state(model: TargetModel) -> State:
    """The least finished of the model files on the model's path (native where all are; none: unsupported)."""
    return least_finished(f.state for f in model.files if f.family is not None) or State.UNSUPPORTED


def expected_layers(context: Context) -> Optional[tuple[int, ...]]:
    """The vLLM ids the drafter was trained on (None: unknown)."""
    found, n = context.ids, context.num_layers
    if found.location is Location.METHOD_FIELD and found.ids is not None:
        return tuple(i + found.plus for i in found.ids)
    if found.ids is None:  # trained on the common default, which is no default where it repeats ids
        return layer_ids.upstream_default(n) if n is not None and n >= layer_ids.SMALLEST_DISTINCT_DEFAULT else None
    convention = infer_convention(found, n).convention
    return convention.to_vllm(found.ids) if convention is not None else None


def layers_finding(
    context: Context, captured: Optional[tuple[int, ...]], source: CaptureSource, expected: Optional[tuple[int, ...]]
) -> Finding:
    check, n = CheckName.LAYERS, context.num_layers
    if captured is None:
        return Finding(check, Assessment.UNKNOWN, LayersFacts(LayersFound.CAPTURE_UNKNOWN, source))
    fix = fix_layers(context, source, expected) if expected else None
    trap = _first_layer_trap(context, captured)
    if trap is not None:
        facts = LayersFacts(LayersFound.FIRST_LAYER, source, captured, expected or (), layers=n, trap=trap)
        return Finding(check, Assessment.PROBLEM, facts, Remedy.NOT_LAYER_ZERO)
    unreached = _last_layer_unreached(context, captured)
    if unreached is not None:
        facts = LayersFacts(LayersFound.LAST_LAYER, source, captured, expected or (), layers=n, trap=unreached)
        return Finding(check, Assessment.PROBLEM, facts, Remedy.NOT_LAYER_N)
    if n is not None and any(i > n for i in captured):
        facts = LayersFacts(LayersFound.BEYOND_THE_TARGET, source, captured, layers=n)
        return Finding(check, Assessment.PROBLEM, facts, fix)
    fc_states = aux_state_count(context)
    if fc_states is not None and fc_states != len(captured):
        facts = LayersFacts(LayersFound.OTHER_COUNT, source, captured, fc_states=fc_states)
        return Finding(check, Assessment.PROBLEM, facts, fix)
    if expected is None and context.ids.ids is None:
        facts = LayersFacts(LayersFound.UNDECIDED_DEFAULT, source, captured, layers=n)
        return Finding(check, Assessment.UNKNOWN, facts)
    if expected is None:
        raw = context.ids.ids or ()
        candidates = tuple((convention, convention.to_vllm(raw)) for convention in Convention)
        facts = LayersFacts(LayersFound.UNDECIDED_CONVENTION, source, captured, candidates=candidates)
        return Finding(check, Assessment.UNKNOWN, facts)
    if captured != expected:
        facts = LayersFacts(LayersFound.OTHER_LAYERS, source, captured, expected)
        return Finding(check, Assessment.PROBLEM, facts, fix_layers(context, source, expected))
    return Finding(check, Assessment.OK, LayersFacts(LayersFound.SAME_LAYERS, source, captured, expected))


def fix_layers(
    context: Context, source: CaptureSource, expected: tuple[int, ...]
) -> Union[SetDrafterConfig, ApplyAuxLayers]:
    """Drafter ids vLLM reads can only be corrected in the drafter's config (its top-level ids, which every runner
    reads first and as they are); others by ``apply``."""
    if source.capture in (Capture.DRAFTER_TOP_LEVEL, Capture.RUNNERS_DIFFER):
        return SetDrafterConfig(context.drafter.path, FIELD, list(expected))
    return ApplyAuxLayers(expected)


def aux_state_count(context: Context) -> Optional[int]:
    """How many target hidden states the drafter's fc concatenates, from its weight's shape."""
    hidden = context.target.number("hidden_size") if context.target else None
    shape = next((s for name, s in context.shapes.items() if name.endswith("fc.weight")), None)
    if hidden is None or shape is None or len(shape) != 2 or shape[1] % hidden:
        return None
    return shape[1] // hidden
