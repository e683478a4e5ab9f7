"""Which model family serves a target model, and whether this install makes it an EAGLE-3 target.

The runner judges the class the registry maps the checkpoint's architecture to; this tool knows
that class's file (a family's model file or multimodal wrapper) and the gate in front of it.  A
target is ready when every file on its path is patched or native: ``status --check --model`` for
a deployment's own model, whatever else on the install is unpatched, and ``doctor``'s layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

from ..codemod.family import Family
from ..codemod.target import State
from ..discovery import model_types
from ..eagle3.class_chain import ChainReader
from ..eagle3.release import PROPOSER
from ..errors import ToolError
from ..patches.eagle_proposer import WRAPPER as MEDIA_TOKEN_WRAPPER
from ..plan import FilePlan, Plan
from ..registry import FAMILIES
from .drafter_config import ModelConfig, read_config

READY = (State.PATCHED, State.NATIVE)
MODELS = "model_executor/models"


@dataclass(frozen=True)
class TargetModel:
    """A model as the runner will hold it on this install."""

    architecture: str
    module: Optional[str]
    """The registry's module for it (``deepseek_v2``), None where the release does not register it."""
    family: Optional[Family]
    files: tuple[FilePlan, ...]
    """The plan's files on its path: the family's model file and the wrapper it is served through."""
    model_type: str = ""
    """The ``hf_text_config.model_type`` the gate judges."""
    gate_admits: bool = True
    declares_eagle3: bool = False
    """The registered class implements EAGLE-3 itself (Llama's and every class inheriting it)."""

    @property
    def ready(self) -> bool:
        if self.declares_eagle3:
            return self.gate_admits
        return self.family is not None and self.gate_admits and all(f.state in READY for f in self.files)

    @property
    def native(self) -> bool:
        """Every file vLLM needs for it does the job itself (the gate may be patched or native)."""
        model_files = [f for f in self.files if f.family is not None]
        return bool(model_files) and all(f.state is State.NATIVE for f in model_files)

    def verdict(self) -> str:
        where = f" ({self.module}.py)" if self.module else ""
        if self.module is None:
            return f"{self.architecture}: not in this vLLM's model registry"
        if self.declares_eagle3:
            if self.gate_admits:
                return f"{self.architecture}{where}: an EAGLE-3 target on this install (native: its class has it)"
            return (
                f"{self.architecture}{where}: not an EAGLE-3 target yet (its class implements EAGLE-3, but the "
                f"speculative-config gate refuses model type {self.model_type!r})"
            )
        if self.family is None:
            return f"{self.architecture}{where}: not a model family this tool patches"
        if self.ready:
            how = "native" if self.native else "patched"
            return f"{self.architecture}{where}: an EAGLE-3 target on this install ({self.family.name}, {how})"
        waiting = [f"{f.path} is {f.state.value}" for f in self.files if f.state not in READY]
        if not self.gate_admits:
            waiting.append(f"the speculative-config gate refuses model type {self.model_type!r}")
        return f"{self.architecture}{where}: not an EAGLE-3 target yet ({', '.join(waiting)})"


def target_model(plan: Plan, model: str) -> TargetModel:
    """``model``: an architecture name, or a checkpoint directory (or its config.json) naming one."""
    config = read_config(Path(model), "target") if Path(model).exists() else None
    return target_model_of(plan, _architecture(model, config), config)


def target_model_of(plan: Plan, architecture: str, config: Optional[ModelConfig]) -> TargetModel:
    """The model the registry serves ``architecture`` with; a checkpoint's model type where the
    release does not register its architecture (a multimodal class older releases lack)."""
    entry = plan.release.registry.get(architecture)
    module = entry[0] if entry else None
    family, wrapper = _family_of(module)
    if family is None:
        family = plan.discovery.architectures.get(architecture)  # found by rule in the registry
    if family is None and entry is not None:
        chain = ChainReader(plan.release.read).registered(*entry)
        if chain is not None and chain.declares_eagle3:
            model_type = str(config.text.get("model_type", "")) if config else model_types(architecture, entry[0])[0]
            return TargetModel(
                architecture, module, None, (), model_type, plan.release.gate_admits(model_type), declares_eagle3=True
            )
    if family is None and config is not None:
        family = _family_of_type(str(config.text.get("model_type", "")))
        module = PurePosixPath(family.path).stem if family else module
    if family is None:
        return TargetModel(architecture, module, None, ())
    paths = {family.path}
    if wrapper and family.wrapper is not None:
        paths.add(family.wrapper.path)
        if family.wrapper.cls == MEDIA_TOKEN_WRAPPER:
            paths.add(PROPOSER)  # the proposer must find Kimi-K2.5's media token
    if family.forward_from is not None:
        paths.add(family.forward_from.path)  # its model runs that family's forward
    files = tuple(f for f in plan.files if f.path in paths)
    model_type = str(config.text.get("model_type", "")) if config else _model_type(architecture, family, wrapper)
    return TargetModel(architecture, module, family, files, model_type, plan.release.gate_admits(model_type))


def _model_type(architecture: str, family: Family, wrapper: bool) -> str:
    """The model type of an architecture given by name: its wrapper's text config's, or the family's
    type its name spells (``DeepseekV3ForCausalLM`` -> ``deepseek_v3``), else the family's first."""
    if wrapper and family.wrapper is not None and family.wrapper.text_model_type:
        return family.wrapper.text_model_type
    name = architecture.lower()
    spelled = [t for t in family.model_types if name.startswith(t.replace("_", ""))]
    return max(spelled, key=len) if spelled else (family.model_types or ("",))[0]


def _architecture(model: str, config: Optional[ModelConfig]) -> str:
    if config is None:
        return model
    if config.architecture is None:
        raise ToolError(f"{config.path}: no architectures list to tell which model class vLLM serves it with")
    return config.architecture


def _family_of_type(model_type: str) -> Optional[Family]:
    return next((family for family in FAMILIES if model_type in family.model_types), None)


def _family_of(module: Optional[str]) -> tuple[Optional[Family], bool]:
    """The family whose model file or wrapper is ``module``, and whether it is the wrapper."""
    for family in FAMILIES:
        if family.path == f"{MODELS}/{module}.py":
            return family, False
        if family.wrapper is not None and family.wrapper.path == f"{MODELS}/{module}.py":
            return family, True
    return None, False
