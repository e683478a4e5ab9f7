"""Which model family serves a target model, and whether this install makes it an EAGLE-3 target.

The runner judges the class the registry maps the checkpoint's architecture to; this tool knows
that class's file (a family's model file or multimodal wrapper) and the gate in front of it.  A
target is ready when every file on its path is patched or native: ``status --check --model`` for
a deployment's own model, whatever else on the install is unpatched, and ``doctor``'s layers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Optional

from ..architecture_verdicts import FamilyFile, Implements, PerPlatform, RunnerReason, WrapperFile, gate_types, judge
from ..catalog import FAMILIES
from ..codemod.family import Family, FoundWrapper
from ..codemod.patch import State
from ..discovery import PlatformVariant, model_types
from ..eagle3.methods import MethodSupport
from ..eagle3.modules import path_of, registry_module
from ..eagle3.native_ids import Uncapturable, uncapturable_ids
from ..eagle3.release import PROPOSER_FILES, Release
from ..errors import ToolError
from ..patches.eagle_proposer import names_target
from ..plan import FilePlan, Plan
from .drafter_config import ModelConfig, read_config
from .gate import GateVerdict, gate_verdict

READY = (State.PATCHED, State.NATIVE)


@dataclass(frozen=True)
class TargetModel:
    """A model as the runner will hold it on this install, as facts (``render/words.py`` words its verdict)."""

    architecture: str
    module: Optional[str]
    """The registry's module for it (``deepseek_v2``), None where the release does not register it."""
    family: Optional[Family]
    files: tuple[FilePlan, ...]
    """The plan's files on its path: the family's model file and the wrapper it is served through."""
    gate: GateVerdict = GateVerdict(())
    """The gate's answer for every ``hf_text_config.model_type`` its checkpoints name (a checkpoint's own)."""
    declares_eagle3: bool = False
    """The registered class implements EAGLE-3 itself (Llama's and every class inheriting it)."""
    from_checkpoint: bool = False
    """The model type is the checkpoint's own, not every type the architecture's checkpoints use."""
    wrapper: Optional[FoundWrapper] = None
    """The multimodal class found by rule that serves it, handing EAGLE-3 on to its language model."""
    language_model: Optional[TargetModel] = None
    """The language model the checkpoint's text config names, where the wrapper leaves the choice to it."""
    refusal: Optional[str] = None
    """Why a class found by rule on several platforms cannot be served (each hands EAGLE-3 on)."""
    runner: Optional[RunnerReason] = None
    """Why the runner refuses the registered class, as ``status --architectures`` says it (``judge``'s reason:
    unserved, unreadable, another family's file, a refused platform's class)."""
    unknown: Optional[str] = None
    """Why nothing can be judged: the release's EAGLE-3 interface was not established (``Release.no_eagle3``)."""

    first_layer_trap: Optional[str] = None
    """``path:line`` of vLLM's own decoder capture that fails at aux id 0 (``native_ids.Uncapturable.first_layer``)."""
    last_layer_unreached: Optional[str] = None
    """``path:line`` of vLLM's own decoder capture that never reaches id n (``native_ids.Uncapturable.last_layer``)."""
    methods: tuple[MethodSupport, ...] = ()
    """The release's hidden-state methods (``Release.methods``): a class that implements the interface serves each
    one the gate lets through."""

    @property
    def implements(self) -> bool:
        """The class the runner holds passes its check (``supports_eagle3``, the methods), whatever the gate says."""
        if self.wrapper is not None:
            return all(f.state in READY for f in self.files) and (
                not self.wrapper.chosen_by_checkpoint or bool(self.language_model and self.language_model.implements)
            )
        if self.declares_eagle3:
            return True
        return self.family is not None and all(f.state in READY for f in self.files)

    @property
    def ready(self) -> bool:
        """A target for EAGLE-3 on this install: the runner's check and the gate's."""
        inner_admits = self.language_model is None or self.language_model.gate.admits
        return self.implements and self.gate.admits and inner_admits

    @property
    def serves(self) -> tuple[str, ...]:
        """The hidden-state methods vLLM serves it with on this install: every one the release has, where the class
        implements the interface and the gate (where it checks that method) admits its model type."""
        if not self.implements or self.unknown is not None:
            return ()
        admitted = self.gate.admits and (self.language_model is None or self.language_model.gate.admits)
        return tuple(m.method.name for m in self.methods if admitted or not m.gated)

    @property
    def native(self) -> bool:
        """Every file vLLM needs for it does the job itself (the gate may be patched or native)."""
        model_files = [f for f in self.files if f.family is not None]
        return bool(model_files) and all(f.state is State.NATIVE for f in model_files)

    @property
    def apply_fixes(self) -> bool:
        """Whether ``apply`` makes it an EAGLE-3 target: all it lacks is unpatched files and the gate's types."""
        if self.ready or (self.family is None and not self.declares_eagle3 and self.wrapper is None):
            return False
        inner = self.language_model
        if (
            self.wrapper is not None
            and self.wrapper.chosen_by_checkpoint
            and not (inner and (inner.ready or inner.apply_fixes))
        ):
            return False
        waiting = [f for f in self.files if f.state not in READY]
        return (self.gate.admits or self.gate.apply_opens) and all(f.state is State.UNPATCHED for f in waiting)


def target_model(plan: Plan, model: str) -> TargetModel:
    """``model``: an architecture name, or a checkpoint directory (or its config.json) naming one."""
    config = read_config(Path(model), "target") if Path(model).exists() else None
    architecture = checkpoint_architecture(plan.release, config) if config is not None else model
    return target_model_of(plan, architecture, config)


TRANSFORMERS_MAPPING = "transformers/models/auto/modeling_auto.py"
"""Where the transformers installed beside vLLM maps a ``model_type`` to its base model class (``MODEL_MAPPING_NAMES``),
which vLLM takes for a checkpoint whose ``config.json`` names no architectures."""
SUFFIXES = "_SUFFIX_TO_DEFAULTS"
"""The release's table of architecture suffixes, by which its registry turns ``Qwen2VLModel`` into a class it has."""


def checkpoint_architecture(release: Release, config: ModelConfig) -> str:
    """The architecture vLLM serves a checkpoint with: its ``architectures``; else, as vLLM does, the base model
    transformers maps its ``model_type`` to, then the first registered name the release's suffix rule gives it
    (Qwen2-VL's ``save_pretrained`` writes no architectures: ``qwen2_vl`` -> ``Qwen2VLModel`` ->
    ``Qwen2VLForConditionalGeneration``)."""
    if config.architecture is not None:
        return config.architecture
    model_type = str(config.data.get("model_type", ""))
    try:
        mapping = (release.package_dir.parent / TRANSFORMERS_MAPPING).read_text(errors="replace")
    except OSError:
        mapping = ""  # no transformers beside this vLLM (a bare tree): vLLM could not map it either
    base = (
        None
        if not model_type
        else re.search(rf'^\s*\(\s*"{re.escape(model_type)}"\s*,\s*"(\w+)"\s*\)', _mapping_names(mapping), re.M)
    )
    if base is None:
        raise ToolError(
            f"{config.path}: no architectures list, and the transformers beside this vLLM maps no base model to "
            f"model_type {model_type!r} (vLLM would need hf_overrides with the architectures too)"
        )
    return registered_name(release, base.group(1))


def _mapping_names(source: str) -> str:
    """The ``MODEL_MAPPING_NAMES = OrderedDict([...])`` block of transformers' auto-model file."""
    start = source.find("MODEL_MAPPING_NAMES = ")
    return source[start : source.find("\n)", start)] if start >= 0 else ""


def registered_name(release: Release, name: str) -> str:
    """``name`` as the release's registry resolves it: itself where registered; else with the suffix it ends with
    replaced by each suffix of the release's table in turn, the first registered one (vLLM's ``_normalize_arch``)."""
    if name in release.registry:
        return name
    tables = (release.read(path) or "" for path in release.tree.search(SUFFIXES))
    suffixes = next((found for found in map(_suffixes, tables) if found), [])
    ending = next((suffix for suffix in suffixes if name.endswith(suffix)), None)
    if ending is None:
        return name
    candidates = (name.replace(ending, suffix) for suffix in suffixes)
    return next((candidate for candidate in candidates if candidate in release.registry), name)


def _suffixes(source: str) -> list[str]:
    start = source.find(f"{SUFFIXES}:")
    block = source[start : source.find("]\n", start)] if start >= 0 else ""
    return re.findall(r'^\s*\(\s*"(\w+)"\s*,', block, re.M)


def target_model_of(plan: Plan, architecture: str, config: Optional[ModelConfig]) -> TargetModel:
    """The model the registry serves ``architecture`` with, the hidden-state methods the release has, and where its
    decoder, vLLM's own, cannot capture id 0."""
    release = plan.release
    entry = release.registry.get(architecture)
    missed = Uncapturable()
    if entry is not None and release.unknown is None:
        missed = uncapturable_ids(plan.chains, release.read, *entry, release.registry)
    judged = _judged(plan, architecture, config)
    return replace(
        judged, methods=release.methods, first_layer_trap=missed.first_layer, last_layer_unreached=missed.last_layer
    )


def _judged(plan: Plan, architecture: str, config: Optional[ModelConfig]) -> TargetModel:
    """The model the registry serves ``architecture`` with, judged by the one judge of the class the runner holds
    (``architecture_verdicts.judge``, which ``status --architectures`` shows), then given the files on its path and
    the gate; a checkpoint's model type where the release does not register its architecture.  Given by name, it is
    judged by every model type its checkpoints name (``discovery.model_types``), never one guessed."""
    release = plan.release
    entry = release.registry.get(architecture)
    module = entry[0] if entry else None
    if release.unknown is not None:
        return TargetModel(architecture, module, None, (), unknown=release.no_eagle3)
    checkpoint_type = str(config.text.get("model_type", "")) if config else None

    def gate(named: tuple[str, ...]) -> GateVerdict:
        return gate_verdict(plan, (checkpoint_type,) if checkpoint_type is not None else named)

    if entry is None:  # not registered: a checkpoint's model type may still name a family (older multimodal classes)
        family = _family_of_type(checkpoint_type) if checkpoint_type else None
        module = PurePosixPath(family.path).stem if family else None
        return (
            _through_a_family(plan, architecture, module, family, gate(family.model_types), config)
            if family
            else TargetModel(architecture, None, None, ())
        )
    files = {file.path: file for file in plan.files}
    chain = plan.chains.registered(*entry)
    runner = judge(architecture, *entry, chain, files, plan.discovery).runner
    named = _gate_types(plan, architecture, entry)
    if isinstance(runner, PerPlatform) and all(v.state is not None for v in runner.deciding):
        return _per_platform(plan, architecture, entry, plan.discovery.per_platform[architecture], config)
    if isinstance(runner, WrapperFile):
        return _through_a_wrapper(plan, architecture, entry, plan.discovery.wrappers[architecture], config)
    if isinstance(runner, Implements):
        return TargetModel(architecture, module, None, (), gate(named), True, config is not None)
    if isinstance(runner, FamilyFile):
        family = _family_named(plan, architecture, runner.family)
        return _through_a_family(plan, architecture, module, family, gate(named or family.model_types), config)
    return TargetModel(architecture, module, None, (), runner=runner)


def _gate_types(plan: Plan, architecture: str, entry: tuple[str, str]) -> tuple[str, ...]:
    """The model types the gate sees for the architecture's checkpoints, as ``status --architectures`` judges them
    (a multimodal class by its language model's); by its own name's where each checkpoint decides (LLaVA's)."""
    release = plan.release
    kind = "multimodal" if architecture in release.multimodal_models else "text"
    chain = plan.chains.registered(*entry)
    return gate_types(architecture, entry[0], chain, release.registry, kind) or model_types(architecture, entry[0])


def _through_a_family(
    plan: Plan,
    architecture: str,
    module: Optional[str],
    family: Family,
    gate: GateVerdict,
    config: Optional[ModelConfig],
) -> TargetModel:
    """A class holding a family's causal LM: the family's file (and the one whose ``forward`` its model runs)."""
    paths = {family.path}
    if family.forward_from is not None:
        paths.add(family.forward_from.path)  # its model runs that family's forward
    files = tuple(f for f in plan.files if f.path in paths)
    return TargetModel(architecture, module, family, files, gate, False, config is not None)


def _family_named(plan: Plan, architecture: str, name: str) -> Family:
    """The family ``judge`` found on the class's chain: the catalog's, or the one discovery found for it."""
    found = plan.discovery.architectures.get(architecture)
    return next(family for family in (*FAMILIES, *([found] if found else [])) if family.name == name)


def _per_platform(
    plan: Plan,
    architecture: str,
    entry: tuple[str, str],
    variants: tuple[PlatformVariant, ...],
    config: Optional[ModelConfig],
) -> TargetModel:
    """A class a package picks per platform: the class CUDA imports decides (every one, where the package's guards
    cannot tell), native, patched by its family, or handing EAGLE-3 on to its language model."""
    module = entry[0]
    deciding = [v for v in variants if v.cuda] or list(variants)
    wrapped = [plan.discovery.wrappers[v.wrapper] for v in deciding if v.wrapper in plan.discovery.wrappers]
    if wrapped and len(deciding) == 1:
        return _through_a_wrapper(plan, architecture, entry, wrapped[0], config)
    if wrapped:
        return TargetModel(architecture, module, None, (), refusal="classes of several platforms hand EAGLE-3 on")
    checkpoint_type = str(config.text.get("model_type", "")) if config else None
    types = (checkpoint_type,) if checkpoint_type is not None else _gate_types(plan, architecture, entry)
    gate = gate_verdict(plan, types)
    families = [plan.discovery.family_of(v.family, FAMILIES) for v in deciding if v.family is not None]
    if not families:  # every deciding class is native
        return TargetModel(architecture, module, None, (), gate, True, config is not None)
    paths = {family.path for family in families if family is not None}
    files = tuple(f for f in plan.files if f.path in paths)
    return TargetModel(architecture, module, families[0], files, gate, False, config is not None)


def _through_a_wrapper(
    plan: Plan, architecture: str, entry: tuple[str, str], found: FoundWrapper, config: Optional[ModelConfig]
) -> TargetModel:
    """A multimodal class found by rule: its file, its language model's family file, the proposer (where its
    ``load_model`` does not name the class) and the gate, judged by the checkpoint's text model type where given;
    where the checkpoint chooses the language model, that one is judged too."""
    paths = {found.wrapper.path, *_proposer_reading_generically(plan, entry[1])}
    if found.family is not None:
        paths.add(found.family.path)
    files = tuple(f for f in plan.files if f.path in paths)
    types = (str(config.text.get("model_type", "")),) if config else _gate_types(plan, architecture, entry)
    inner = None
    named = config.text.get("architectures") if config is not None else None
    if found.chosen_by_checkpoint and isinstance(named, list) and named:
        inner = target_model_of(plan, str(named[0]), None)
    gate = gate_verdict(plan, types)
    return TargetModel(architecture, entry[0], found.family, files, gate, False, config is not None, found, inner)


def _proposer_reading_generically(plan: Plan, architecture: str) -> tuple[str, ...]:
    """The proposer's file, where its ``load_model`` does not name ``architecture`` (its generic branch serves it)."""
    return tuple(
        f.path
        for f in plan.files
        if f.path in PROPOSER_FILES and not names_target(plan.release.read(f.path) or "", architecture)
    )


def _family_of_type(model_type: str) -> Optional[Family]:
    return next((family for family in FAMILIES if model_type in family.model_types), None)


def module_path(module: str) -> str:
    """The registry's module (``llama``, or ``vllm.models.x.y`` from 0.30) as a path under ``vllm/``."""
    return path_of(registry_module(module))
