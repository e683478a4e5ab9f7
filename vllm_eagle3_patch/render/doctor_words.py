"""The words of ``doctor``'s findings (``drafters/doctor_facts.py``): what each check found and the command or
step that fixes it, for the text and the ``--json`` object alike."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..drafters.doctor import Diagnosis
from ..drafters.doctor_facts import (
    LLAMA_DRAFTER,
    NATIVE_MLA_DRAFTERS,
    ApplyAuxLayers,
    ArchitectureFacts,
    Capture,
    CaptureSource,
    Carrying,
    CheckName,
    ConventionFacts,
    DraftMap,
    DraftVocabularyFacts,
    Finding,
    Fix,
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
from ..eagle3.release import DRAFTER_IDS_FIELD as FIELD
from ..eagle3.release import REGISTRY, RUNNER, V2_PACKAGE, V2_SWITCH, GpuDefault
from ..plan import Plan
from .plan_words import file_reason, plan_reason
from .words import first_layer_words, last_layer_words, target_verdict

_OTHER_SIZE = {CheckName.HIDDEN_SIZE: "trained for another model", CheckName.VOCABULARY: "another tokenizer"}
"""What a size that differs from the target's means, by check."""


def finding_detail(finding: Finding, diagnosis: Diagnosis) -> str:
    """What a ``doctor`` check found, in words."""
    found, version = finding.found, diagnosis.plan.install.version
    if isinstance(found, ReleaseFacts):
        return release_detail(found)
    if isinstance(found, ArchitectureFacts):
        return architecture_detail(found, diagnosis)
    if isinstance(found, SizeFacts):
        return size_detail(found, _OTHER_SIZE[finding.check])
    if isinstance(found, NeedsTarget):
        return "needs the target's config.json"
    if isinstance(found, DraftVocabularyFacts):
        return draft_vocabulary_detail(found)
    if isinstance(found, IdsFacts):
        return ids_detail(found, version)
    if isinstance(found, ConventionFacts):
        return convention_detail(found)
    if isinstance(found, LayersFacts):
        return layers_detail(found, diagnosis.plan)
    return pipeline_detail(found, version)


def finding_fix(finding: Finding, diagnosis: Diagnosis) -> Optional[str]:
    """The command (or the step) that fixes what a check found (None: none is needed)."""
    fix = finding.fix
    return fix_text(fix, diagnosis) if fix is not None else None


def release_detail(facts: ReleaseFacts) -> str:
    """Whether this install serves the target with EAGLE-3, and why."""
    plan, model = facts.plan, facts.model
    where = f"vLLM {plan.install.version} ({plan.state.value})"
    if facts.serving is Serving.THE_FILES:
        return f"{where}: {plan_reason(plan)}"
    if facts.serving is Serving.NO_TARGET or model is None:
        return f"{where}: whether it serves the target with EAGLE-3 depends on the target's class and model type"
    unrecognised = facts.unrecognised
    detail = f"{where}: {target_verdict(model)}" + (f": {file_reason(unrecognised.because)}" if unrecognised else "")
    return detail + (": its own model class decides" if facts.serving is Serving.ITS_OWN_CLASS else "")


def architecture_detail(facts: ArchitectureFacts, diagnosis: Diagnosis) -> str:
    """Whether this release loads the drafter's architecture, by its lookup and its registry."""
    architecture, loaded, version = facts.architecture, facts.loaded, diagnosis.plan.install.version
    lookup = facts.lookup.value if facts.lookup is not None else ""
    if facts.loading is Loading.SPECULATORS_FORMAT:
        return (
            "a speculators-format config: vLLM converts it itself (transformers_utils/configs/speculators); not checked"
        )
    if facts.loading is Loading.NO_ARCHITECTURES:
        return f"{diagnosis.drafter.path if diagnosis.drafter else 'the drafter'}: no architectures list"
    if facts.loading is Loading.NO_EAGLE3_DRAFTER:
        return f"vLLM {version} loads no EAGLE-3 drafter"
    if facts.loading is Loading.FIXED:
        return f"{architecture} loads: vLLM {version}: {lookup}"
    method = f"a {facts.method.name} drafter" if facts.method is not None else ""
    if facts.loading is Loading.NO_SUCH_METHOD and facts.method is not None:
        return f"{architecture} is {method}, and vLLM {version} has no {facts.method.name} (from {facts.method.since})"
    if facts.loading is Loading.REGISTERED:
        renamed = f" as {loaded}" if loaded != architecture else ""
        return f"{architecture} loads{renamed} (registered in {REGISTRY})" + (f": {method}" if method else "")
    if facts.loading is Loading.MLA_ON_FIXED:
        return f"{architecture} is an MLA drafter, but vLLM {version}: {lookup}"
    if method:
        return f"{architecture} is {method}, and vLLM {version} does not register it in {REGISTRY}"
    return f"{architecture} cannot load on vLLM {version}: {lookup}, and {loaded} is not in {REGISTRY}"


def size_detail(facts: SizeFacts, other: str) -> str:
    """A size the drafter was trained with against the target's (``other``: what a difference means)."""
    drafter_key, target_key = facts.drafter_key, facts.target_key
    if facts.sizes is Sizes.MISSING:
        return f"the drafter's {drafter_key} or the target's {target_key} is missing"
    if facts.sizes is Sizes.DIFFER:
        return f"the drafter's {drafter_key} is {facts.expects}, the target's {target_key} {facts.actual}: {other}"
    return f"{facts.actual} (the drafter's {drafter_key}, the target's {target_key})"


def draft_vocabulary_detail(facts: DraftVocabularyFacts) -> str:
    draft = facts.draft
    if facts.draft_map is DraftMap.WHOLE_VOCABULARY:
        return "drafts over the whole vocabulary"
    if facts.draft_map is DraftMap.EXCEEDS_VOCABULARY:
        return f"draft_vocab_size {draft} exceeds vocab_size {facts.vocabulary}"
    if facts.draft_map is DraftMap.UNCHECKED:
        return f"draft_vocab_size {draft}: no safetensors header to check its d2t map"
    if facts.draft_map is DraftMap.NO_MAP:
        found = "no d2t tensor" if facts.d2t is None else f"a d2t tensor of shape {facts.d2t}"
        return f"draft_vocab_size {draft} needs a d2t map of {draft} entries; the checkpoint has {found}"
    return f"draft_vocab_size {draft} with its d2t map"


def runner_name(path: str) -> str:
    """``model runner V2`` for a runner of V2's package, ``model runner V1`` for V1's file, else its file."""
    if path.startswith(V2_PACKAGE):
        return "model runner V2"
    return "model runner V1" if path == RUNNER else path


def runner_read_text(read: RunnerRead) -> str:
    """What one runner takes from the drafter: a field and the ids it uses, or the target's getter."""
    name = runner_name(read.runner) + (" (the default on a GPU)" if read.default else "")
    if not read.readable:
        return f"{name} reads ids in a way this tool cannot follow"
    if read.read is None:
        return f"{name} ignores them and asks the target's getter"
    taken = read.read
    shift = f", +{taken.field.shift} each" if taken.field.shift and taken.used != taken.written else ""
    used = list(taken.used) if taken.used is not None else "ids this tool cannot evaluate"
    return f"{name} reads {taken.field.name} {list(taken.written)}{shift}: layers {used}"


def ids_detail(facts: IdsFacts, version: str) -> str:
    """Where the drafter keeps its ids, and which runner of this release reads them, where, with what shift."""
    if facts.ids.ids is None and not any(r.read for r in facts.runners):
        return f"no {FIELD} in the drafter config: the target's ids are used"
    found = f"{facts.ids.field} {list(facts.ids.ids)}" if facts.ids.ids is not None else "the drafter's config"
    if not facts.runners:
        return f"{found}: vLLM {version} ignores a drafter's ids (read from 0.11.1 on)"
    choice = f"; {CHOICE_WORDS[facts.choice]}" if facts.choice not in (None, GpuDefault.ONLY) else ""
    return f"{found}: on vLLM {version}, " + "; ".join(map(runner_read_text, facts.runners)) + choice


CHOICE_WORDS = {
    GpuDefault.V1: f"a GPU runs V1 unless {V2_SWITCH}=1",
    GpuDefault.V2: f"a GPU runs V2 unless {V2_SWITCH}=0",
    GpuDefault.LISTED: f"a GPU runs V2 for some architectures, V1 for the others; {V2_SWITCH}=0 or 1 pins one",
    GpuDefault.UNKNOWN: f"which runner serves cannot be told; {V2_SWITCH}=0 or 1 pins one",
}


def convention_detail(facts: ConventionFacts) -> str:
    inference = facts.inference
    if inference is None:
        return "no ids: assuming the default of EAGLE-3 and SpecForge training, vLLM's (2, n // 2, n - 3)"
    if inference.convention is None:
        return f"cannot tell: {inference.reason}"
    return f"{inference.convention.value}: {inference.reason}"


def layers_detail(facts: LayersFacts, plan: Plan) -> str:
    """What vLLM will capture, from where, against what the drafter was trained on."""
    source = capture_source(facts.source, plan)
    if facts.found is LayersFound.CAPTURE_UNKNOWN:
        return f"cannot tell what vLLM will capture: {source}"
    will = f"vLLM will capture {list(facts.captured)} ({source})"
    n = facts.layers
    if facts.found is LayersFound.BEYOND_THE_TARGET:
        return f"{will}, but the target has only {n} layers (ids 0..{n})"
    if facts.found is LayersFound.OTHER_COUNT:
        return f"{will}, but the drafter's fc takes {facts.fc_states} hidden states"
    if facts.found is LayersFound.UNDECIDED_DEFAULT:
        return f"{will}; the drafter names no ids and (2, n // 2, n - 3) repeats ids for {n} layers: undecided"
    if facts.found is LayersFound.UNDECIDED_CONVENTION:
        candidates = " or ".join(f"{list(ids)} ({convention.value})" for convention, ids in facts.candidates)
        return f"{will}; the drafter expects {candidates}, undecided"
    if facts.found is LayersFound.OTHER_LAYERS:
        return f"{will}; the drafter was trained on {list(facts.expected)}"
    if facts.found is LayersFound.FIRST_LAYER and facts.trap:
        return f"{will}, but not layer 0: {first_layer_words(facts.trap)}"
    if facts.found is LayersFound.LAST_LAYER and facts.trap:
        return f"{will}, but not layer {n}: {last_layer_words(facts.trap)}"
    if facts.found is LayersFound.SAVED:
        saved = f"extract_hidden_states will save {list(facts.captured)} ({source}): " + "; ".join(
            saved_layer_words(i, facts.layers) for i in facts.captured
        )
        if facts.trap and facts.last_layer:
            return saved + f"; but not layer {n}: {last_layer_words(facts.trap)}"
        return saved + (f"; but not layer 0: {first_layer_words(facts.trap)}" if facts.trap else "")
    return f"{will}; the drafter was trained on the same"


def saved_layer_words(layer: int, layers: Optional[int]) -> str:
    """What vLLM's aux id ``layer`` is, in the words of a model's layers and of transformers' hidden states."""
    if layers is not None and layer == layers:
        return f"{layer} = the stream leaving the last layer, before the final norm"
    return f"{layer} = the stream entering layer {layer} (transformers' hidden_states[{layer}])"


def capture_source(source: CaptureSource, plan: Plan) -> str:
    """Where the ids vLLM will capture come from, or why they are not known."""
    default, version = source.default, plan.install.version
    own_default = f"vLLM's own default, {default.text} in {default.where}" if default is not None else ""
    return {
        Capture.DRAFTER_TOP_LEVEL: (
            f"the drafter's ids, which vLLM {version} reads"
            if source.read is None
            else f"the drafter's {source.read.read.field.name if source.read.read else FIELD}, which "
            f"{runner_name(source.read.runner)} of vLLM {version} reads"
        ),
        Capture.RUNNERS_DIFFER: (
            f"vLLM {version}'s runners take other layers from this drafter ("
            + "; ".join(map(runner_read_text, source.runners))
            + f"), and which serves this target cannot be told: set {V2_SWITCH}=0 or 1, or give the drafter "
            "top-level ids, which both read first"
        ),
        Capture.NO_LAYER_COUNT: "needs the target's num_hidden_layers",
        Capture.NO_TARGET_CONFIG: "needs the target's config.json",
        Capture.NOT_A_FAMILY: "the target is not a model family this tool patches, and its class lacks EAGLE-3",
        Capture.BAKED_IN: "baked in by apply --aux-layers",
        Capture.PATCHED_DEFAULT: "the patched default",
        Capture.PATCHED_DEFAULT_ONCE_APPLIED: "the patched default, once applied",
        Capture.INSTALL_STATE: f"vLLM {version} is {plan.state.value}",
        Capture.UNREADABLE_GETTER: f"{source.architecture}'s own class chooses, by a getter this tool cannot read",
        Capture.UNEVALUATED_DEFAULT: f"{own_default}, which this tool cannot evaluate",
        Capture.OWN_DEFAULT: own_default,
    }[source.capture]


def pipeline_detail(facts: PipelineFacts, version: str) -> str:
    """Whether vLLM runs EAGLE-3 over pipeline ranks for the target, and how to serve it where it does not."""
    where, architecture = f"vLLM {version}", facts.architecture
    if facts.carrying is Carrying.ONE_STAGE:
        return (
            f"{where} runs EAGLE-3 on one pipeline stage only: before 0.30.0 it gives the drafter the target's "
            "pipeline size and refuses it (an EAGLE drafter has no SupportsPP); scale with --tensor-parallel-size"
        )
    if facts.carrying is Carrying.ASK_THE_TARGET:
        return (
            f"{where} carries aux states across pipeline ranks for targets that "
            "declare it (model runner V2); give --target to learn whether yours does"
        )
    if facts.carrying is Carrying.CARRIED:
        return f"{where}: {architecture} carries its aux states across pipeline ranks (model runner V2)"
    return (
        f"{where}: {architecture} does not carry aux states across pipeline ranks: serve it with "
        "--pipeline-parallel-size 1 (vLLM refuses EAGLE-3 over ranks for it)"
    )


def fix_text(fix: Fix, diagnosis: Diagnosis) -> str:
    """The command that fixes a finding, for this install and this drafter; or the step where no command does."""
    command = diagnosis.plan.install.command()
    drafter = diagnosis.drafter.directory if diagnosis.drafter is not None else "DRAFTER_DIR"
    if isinstance(fix, SetDrafterConfig):
        return set_config_command(fix.path, fix.key, fix.value)
    if isinstance(fix, ApplyAuxLayers):
        return f"{command} apply --aux-layers {','.join(map(str, fix.ids))}"
    return {
        Remedy.APPLY: f"{command} apply",
        Remedy.REVERT_THEN_APPLY: f"{command} revert --force && {command} apply",
        Remedy.GIVE_THE_TARGET: f"{command} doctor --drafter {drafter} --target TARGET_DIR",
        Remedy.UPGRADE_VLLM: f"pip install '{NATIVE_MLA_DRAFTERS}'",
        Remedy.UPGRADE_FOR_MLA_DRAFTER: (
            f"pip install '{NATIVE_MLA_DRAFTERS}'  (MLA drafters load from 0.18.0; or use a Llama-architecture drafter)"
        ),
        Remedy.NONE_FROM_THIS_TOOL: "none from this tool: a newer vLLM, or another target",
        Remedy.REGISTERED_DRAFTER: (
            f"use a drafter whose architecture vLLM {diagnosis.plan.install.version} registers (e.g. {LLAMA_DRAFTER})"
        ),
        Remedy.TRAINED_DRAFTER: "use the drafter trained for this target",
        Remedy.INTACT_CHECKPOINT: "use an intact drafter checkpoint",
        Remedy.NEWER_VLLM_FOR_METHOD: _newer_for_method(diagnosis),
        Remedy.NOT_LAYER_ZERO: (
            "ask for ids from 1 (a drafter trained on other layers, or other extract_hidden_states ids): "
            "vLLM's own decoder of this target cannot hand over layer 0"
        ),
        Remedy.NOT_LAYER_N: (
            "ask for ids below the layer count (a drafter trained on other layers, or other extract_hidden_states "
            "ids): vLLM's own decoder of this target never hands over the last layer's output"
        ),
        Remedy.CHOOSE_CONVENTION: (
            f"{command} apply --aux-layers-from {drafter} --ids-convention sglang  (or vllm: as it was trained)"
        ),
    }[fix]


def _newer_for_method(diagnosis: Diagnosis) -> str:
    method = next((f.found.method for f in diagnosis.findings if isinstance(f.found, ArchitectureFacts)), None)
    return f"pip install 'vllm>={method.since}'  (the first with {method.name})" if method else "a newer vLLM"


def set_config_command(path: Path, key: str, value: list[object]) -> str:
    """A command that sets one top-level key of a config.json (no jq needed)."""
    program = (
        f"import json, pathlib; p = pathlib.Path({str(path)!r}); c = json.loads(p.read_text()); "
        f"c[{key!r}] = {value!r}; p.write_text(json.dumps(c, indent=2))"
    )
    return f'python3 -c "{program}"'
