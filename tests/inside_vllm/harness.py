"""Run a real vLLM ``DeepseekV2Model`` (or another family's decoder) on CPU with small stand-in decoder layers.

This module is imported *inside* a venv that has CPU torch and a (patched) vLLM release
first on ``PYTHONPATH``.  It never stands in for vLLM itself: the model class, its
``__init__`` (wrapped by ``support_torch_compile``), ``make_layers``, ``PPMissingLayer``,
``IntermediateTensors`` and ``forward`` are the release's own code.  What is replaced, for
the duration of a ``with deepseek_stage(...)`` block only, are the module-level names that
need a GPU, a process group or real weights:

* ``get_pp_group`` (in ``deepseek_v2`` and in ``vllm.distributed.parallel_state``, where the
  real ``make_layers`` imports it from) -> :class:`FakePPGroup`;
* ``vllm.distributed.utils.get_pp_indices`` -> returns the chosen ``(start, end)``;
* ``DeepseekV2DecoderLayer`` -> :class:`StandInLayer` (a cheap affine map that records what
  it was called with);
* ``RMSNorm`` -> :class:`StandInNorm`, ``VocabParallelEmbedding`` -> :class:`StandInEmbedding`.

The torch-compile decorator's ``__init__`` wrapper runs for real; a stand-in
``compilation_config`` whose level/mode means "no compilation" makes it return right after
the model's own ``__init__`` (the same path vLLM takes with ``enforce_eager``).

The expected results (:func:`reference_forward`) are computed from the stand-ins' formulas
alone, never by calling the code under test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import inspect
import re
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from packaging.version import Version
from torch import nn

DEEPSEEK_V2 = "vllm.model_executor.models.deepseek_v2"
HIDDEN_SIZE = 4
NUM_TOKENS = 3
VOCAB_SIZE = 16
GETTERS = ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
"""The names a target's default aux layer ids are asked by: from 0.18.0, and before."""
MARK = "# vllm-eagle3-patch"
"""The comment on every line this tool writes (a file without it is not patched by the tool)."""


def vllm_version() -> Version:
    """The release on ``PYTHONPATH`` (its dist-info sits next to the ``vllm/`` package)."""
    try:
        return Version(importlib.metadata.version("vllm"))
    except importlib.metadata.PackageNotFoundError:  # a tree without dist-info
        from vllm.version import __version__

        return Version(__version__)


def default_ids_getter() -> str:
    """The name under which the release's runner asks a target for its default aux layer ids.

    ``get_eagle3_default_aux_hidden_state_layers`` from 0.18.0 (``SupportsEagle3`` builds on
    ``EagleModelMixin``), ``get_eagle3_aux_hidden_state_layers`` before: read from the
    runner's own text, since importing it needs a GPU stack.
    """
    import vllm

    worker = Path(vllm.__file__).parent / "v1" / "worker"
    runners = (worker / "gpu_model_runner.py", worker / "gpu" / "spec_decode" / "eagle" / "eagle3_utils.py")
    text = "".join(path.read_text(encoding="utf-8") for path in runners if path.exists())  # V1 is gone in 0.34.0
    for name in GETTERS:
        if f".{name}(" in text:
            return name
    raise AssertionError(f"{worker}: no runner asks for default aux layer ids")


def deepseek_module() -> types.ModuleType:
    """The real ``vllm.model_executor.models.deepseek_v2`` module."""
    return importlib.import_module(DEEPSEEK_V2)


# --------------------------------------------------------------------------- stand-ins


def layer_scale(index: int) -> float:
    """Multiplier of stand-in layer ``index``: distinct per layer, exact in float32."""
    return 1.0 + 0.125 * (index + 1)


def layer_shift(index: int) -> float:
    """Offset of stand-in layer ``index``."""
    return float(index + 1)


def layer_formula(
    index: int, hidden_states: torch.Tensor, residual: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """What stand-in layer ``index`` computes: ``(h * a + b, (residual or 0) + h)``."""
    new_residual = hidden_states if residual is None else residual + hidden_states
    return hidden_states * layer_scale(index) + layer_shift(index), new_residual


def norm_formula(hidden_states: torch.Tensor, residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """What the stand-in final norm computes, shaped like fused-add ``RMSNorm``.

    Returns ``(normed, hidden_states + residual)``; ``normed`` differs from the sum so a
    test can tell the normed output from a captured pre-norm state.
    """
    summed = hidden_states if residual is None else hidden_states + residual
    return summed * 0.5 - 0.25, summed


@dataclass
class LayerCall:
    """One call a stand-in layer saw (tensors cloned so later in-place ops cannot hide)."""

    positions: torch.Tensor
    hidden_states: torch.Tensor
    residual: torch.Tensor | None
    extra_args: tuple[Any, ...]


class StandInLayer(nn.Module):
    """Replaces ``DeepseekV2DecoderLayer``; built by the real ``make_layers`` lambda.

    Accepts any constructor arguments (they differ per release) and takes its global index
    from the ``prefix`` string, as the real layer does.  Its ``forward`` tolerates the
    3-argument call (<= 0.11.x) and the 4-argument call with ``llama_4_scaling`` (0.12.0+).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        prefixes = [a for a in (*args, *kwargs.values()) if isinstance(a, str)]
        matches = [m for p in prefixes if (m := re.search(r"layers\.(\d+)$", p))]
        if len(matches) != 1:
            raise AssertionError(f"cannot find the layer prefix in {args!r} {kwargs!r}")
        self.prefix = matches[0].string
        self.index = int(matches[0].group(1))
        self.calls: list[LayerCall] = []

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        *extra_args: Any,
        **extra_kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if extra_kwargs:
            raise AssertionError(f"unexpected keyword arguments {sorted(extra_kwargs)}")
        self.calls.append(
            LayerCall(
                positions=positions.clone(),
                hidden_states=hidden_states.clone(),
                residual=None if residual is None else residual.clone(),
                extra_args=extra_args,
            )
        )
        return layer_formula(self.index, hidden_states, residual)


class HiddenFirstStandInLayer(StandInLayer):
    """A stand-in for layers called ``layer(hidden_states, positions, residual)`` (Bailing MoE)."""

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        positions: torch.Tensor,
        residual: torch.Tensor | None,
        *extra_args: Any,
        **extra_kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(positions, hidden_states, residual, *extra_args, **extra_kwargs)


class StandInNorm(nn.Module):
    """Replaces ``RMSNorm(hidden_size, eps=...)``; every release calls ``norm(h, residual)``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, **kwargs: Any) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.calls = 0

    def forward(
        self, hidden_states: torch.Tensor, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        return norm_formula(hidden_states, residual)


class StandInEmbedding(nn.Module):
    """Replaces ``VocabParallelEmbedding`` (the real one needs a tensor-parallel group)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, **kwargs: Any) -> None:
        super().__init__()
        weight = torch.arange(num_embeddings * embedding_dim, dtype=torch.float32)
        self.weight = nn.Parameter(weight.reshape(num_embeddings, embedding_dim) / 8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.weight[input_ids]


@dataclass(frozen=True)
class FakePPGroup:
    """The parts of vLLM's pipeline-parallel ``GroupCoordinator`` the model code reads."""

    rank_in_group: int
    world_size: int

    @property
    def is_first_rank(self) -> bool:
        return self.rank_in_group == 0

    @property
    def is_last_rank(self) -> bool:
        return self.rank_in_group == self.world_size - 1


def pp_group_for(first: bool, last: bool) -> FakePPGroup:
    """A pipeline position: single stage, first, last or a middle one of three."""
    if first and last:
        return FakePPGroup(rank_in_group=0, world_size=1)
    if first:
        return FakePPGroup(rank_in_group=0, world_size=2)
    if last:
        return FakePPGroup(rank_in_group=1, world_size=2)
    return FakePPGroup(rank_in_group=1, world_size=3)


def no_compile_config() -> types.SimpleNamespace:
    """A ``compilation_config`` telling ``support_torch_compile`` not to compile.

    <= 0.11.0 read ``.level`` (``CompilationLevel.NO_COMPILATION``), 0.11.1+ read ``.mode``
    (``CompilationMode.NONE``); both are set from the release's own enums when present.
    """
    config = importlib.import_module("vllm.config")
    namespace = types.SimpleNamespace()
    if hasattr(config, "CompilationLevel"):
        namespace.level = config.CompilationLevel.NO_COMPILATION
    if hasattr(config, "CompilationMode"):
        namespace.mode = config.CompilationMode.NONE
    if not vars(namespace):
        raise AssertionError("vllm.config has neither CompilationLevel nor CompilationMode")
    return namespace


def fake_vllm_config(num_layers: int, hidden_size: int = HIDDEN_SIZE, **extra: Any) -> types.SimpleNamespace:
    """The attributes of ``VllmConfig`` that ``DeepseekV2Model.__init__`` reads, any release.

    ``hf_config`` has no ``index_topk`` (so not DeepSeek-V3.2, no CUDA buffer) and no
    ``llama_4_scaling`` (so 0.12.0+ pass ``llama_4_scaling=None`` to the layers).
    """
    hf_config = types.SimpleNamespace(
        model_type="deepseek_v3",
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_layers=num_layers,  # LongCat-Flash's name for it from 0.2x
        rms_norm_eps=1e-6,
        **extra,
    )
    model_config = types.SimpleNamespace(hf_config=hf_config, hf_text_config=hf_config)
    return types.SimpleNamespace(
        model_config=model_config,
        cache_config=None,
        quant_config=None,
        lora_config=None,  # Mixtral's model reads it up to 0.9.x
        parallel_config=types.SimpleNamespace(
            enable_eplb=False, eplb_config=types.SimpleNamespace(num_redundant_experts=0)
        ),
        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=NUM_TOKENS),
        compilation_config=no_compile_config(),
    )


# --------------------------------------------------------------------------- patching


class Patcher:
    """``setattr`` with undo, so the harness also works outside pytest's ``monkeypatch``."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def setattr(self, target: object, name: str, value: object) -> None:
        if not hasattr(target, name):
            raise AttributeError(f"{target!r} has no attribute {name!r} to replace")
        self._undo.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def undo(self) -> None:
        while self._undo:
            target, name, value = self._undo.pop()
            setattr(target, name, value)


# --------------------------------------------------------------------------- the stage


@dataclass
class Stage:
    """A built ``DeepseekV2Model`` for one pipeline stage plus what is needed to drive it."""

    model: nn.Module
    module: types.ModuleType
    num_layers: int
    start_layer: int
    end_layer: int
    pp_group: FakePPGroup
    layers: dict[int, StandInLayer] = field(default_factory=dict)

    @property
    def is_first_rank(self) -> bool:
        return self.pp_group.is_first_rank

    @property
    def is_last_rank(self) -> bool:
        return self.pp_group.is_last_rank

    @property
    def intermediate_tensors_class(self) -> type:
        """The real ``IntermediateTensors`` the model module uses."""
        return self.module.IntermediateTensors

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Deterministic ``(hidden_states, residual)`` entering this stage.

        The first rank starts from ``inputs_embeds`` with no residual; other ranks receive
        both from the previous stage.
        """
        hidden = torch.arange(NUM_TOKENS * HIDDEN_SIZE, dtype=torch.float32)
        hidden = hidden.reshape(NUM_TOKENS, HIDDEN_SIZE) / 4 - 1
        if self.is_first_rank:
            return hidden, None
        return hidden, torch.full_like(hidden, 0.75) - hidden / 2

    def run(self, aux_layers: Sequence[int] | None = None, received: Any = None) -> Any:
        """Call the real ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)``.

        ``aux_layers`` (if given) is written to ``model.aux_hidden_state_layers`` first,
        as ``set_aux_hidden_state_layers`` does.  ``received``: what the previous rank sent
        (a later rank's ``IntermediateTensors``), instead of :meth:`inputs`.
        """
        if aux_layers is not None:
            self.model.aux_hidden_state_layers = tuple(aux_layers)
        hidden, residual = self.inputs()
        input_ids = torch.zeros(NUM_TOKENS, dtype=torch.long)
        positions = torch.arange(NUM_TOKENS)
        if self.is_first_rank:
            return self.model.forward(input_ids, positions, None, hidden)
        tensors = received or self.intermediate_tensors_class({"hidden_states": hidden, "residual": residual})
        return self.model.forward(input_ids, positions, tensors, None)


@dataclass
class Reference:
    """What an unpatched forward returns, plus every state a capture could take."""

    layer_inputs: dict[int, torch.Tensor]
    """Global id k -> ``hidden_states + residual`` entering layer k (``hidden_states``
    alone where ``residual`` is None)."""
    final_sum: torch.Tensor | None
    """Last rank: ``hidden_states + residual`` after the stage's last layer, pre-norm."""
    output: torch.Tensor | None
    """Last rank: the normed output the unpatched forward returns."""
    hidden_states: torch.Tensor
    residual: torch.Tensor | None
    """After the stage's last layer: what a non-last rank sends on."""

    def expected_aux(self, ids: Sequence[int], end_layer: int) -> list[torch.Tensor]:
        """The captured states for ``ids``, in layer order, ids outside the stage dropped."""
        wanted = set(ids)
        states = [self.layer_inputs[k] for k in sorted(self.layer_inputs) if k in wanted]
        if end_layer in wanted and self.final_sum is not None:
            states.append(self.final_sum)
        return states


def reference_forward(stage: Stage) -> Reference:
    """Expected results computed from the stand-in formulas alone (no model code)."""
    hidden, residual = stage.inputs()
    layer_inputs: dict[int, torch.Tensor] = {}
    for index in range(stage.start_layer, stage.end_layer):
        layer_inputs[index] = hidden if residual is None else hidden + residual
        hidden, residual = layer_formula(index, hidden, residual)
    if not stage.is_last_rank:
        return Reference(layer_inputs, None, None, hidden, residual)
    output, final_sum = norm_formula(hidden, residual)
    return Reference(layer_inputs, final_sum, output, hidden, residual)


@dataclass(frozen=True)
class DecoderFile:
    """A model file whose decoder the harness builds: what it is called and what to stand in for."""

    module: str
    model: str
    layer: str
    """The decoder layer class, replaced by :class:`StandInLayer`."""
    norm: str = "RMSNorm"
    """The final norm's class, replaced by :class:`StandInNorm`."""
    stand_in: type = StandInLayer
    """What replaces ``layer``: :class:`HiddenFirstStandInLayer` where the call puts the hidden states first."""
    config: tuple[tuple[str, Any], ...] = ()
    """Extra ``hf_config`` fields the model's ``__init__`` reads."""
    layer_parameter: str | None = None
    """The ``__init__`` parameter whose default is ``layer`` (OLMoE's and InternLM2's ``layer_type``): bound at
    definition, so the stand-in is passed there instead."""


DEEPSEEK = DecoderFile(DEEPSEEK_V2, "DeepseekV2Model", "DeepseekV2DecoderLayer")


@contextlib.contextmanager
def deepseek_stage(
    num_layers: int = 8,
    start_layer: int = 0,
    end_layer: int | None = None,
    *,
    first: bool = True,
    last: bool = True,
    model_class: type | None = None,
) -> Iterator[Stage]:
    """Build a real ``DeepseekV2Model`` for layers ``start_layer..end_layer`` of ``num_layers``."""
    with decoder_stage(
        DEEPSEEK, num_layers, start_layer, end_layer, first=first, last=last, model_class=model_class
    ) as stage:
        yield stage


@contextlib.contextmanager
def decoder_stage(
    decoder: DecoderFile,
    num_layers: int = 8,
    start_layer: int = 0,
    end_layer: int | None = None,
    *,
    first: bool = True,
    last: bool = True,
    model_class: type | None = None,
) -> Iterator[Stage]:
    """Build the real ``decoder.model`` for layers ``start_layer..end_layer`` of ``num_layers``.

    ``first``/``last`` choose the pipeline position.  The replaced module-level names stay
    replaced until the block exits, because ``forward`` calls ``get_pp_group()`` too.
    """
    end_layer = num_layers if end_layer is None else end_layer
    if not 0 <= start_layer <= end_layer <= num_layers:
        raise ValueError(f"bad stage {start_layer}..{end_layer} of {num_layers}")
    if first and start_layer != 0:
        raise ValueError("the first pipeline rank starts at layer 0")
    if last and end_layer != num_layers:
        raise ValueError("the last pipeline rank ends at the last layer")
    module = importlib.import_module(decoder.module)
    cls = model_class or getattr(module, decoder.model)
    pp_group = pp_group_for(first, last)
    parallel_state = importlib.import_module("vllm.distributed.parallel_state")
    distributed_utils = importlib.import_module("vllm.distributed.utils")

    forward_module = importlib.import_module(cls.forward.__module__)  # Qwen3.5's model runs Qwen3-Next's forward

    takes_the_layer = decoder.layer_parameter and re.search(rf"\b{decoder.layer_parameter}:", inspect.getsource(cls))
    layer_arguments = {decoder.layer_parameter: decoder.stand_in} if takes_the_layer else {}  # (compile wrappers
    # hide the signature; older releases build the layer by its module-level name)
    patcher = Patcher()
    try:
        patcher.setattr(module, "get_pp_group", lambda: pp_group)
        patcher.setattr(forward_module, "get_pp_group", lambda: pp_group)
        patcher.setattr(parallel_state, "get_pp_group", lambda: pp_group)
        patcher.setattr(distributed_utils, "get_pp_indices", lambda *_args: (start_layer, end_layer))
        patcher.setattr(module, decoder.layer, decoder.stand_in)
        patcher.setattr(module, decoder.norm, StandInNorm)
        patcher.setattr(module, "VocabParallelEmbedding", StandInEmbedding)
        model = cls(vllm_config=fake_vllm_config(num_layers, **dict(decoder.config)), prefix="model", **layer_arguments)
        layers = {index: layer for index, layer in enumerate(model.layers) if isinstance(layer, StandInLayer)}
        yield Stage(model, module, num_layers, start_layer, end_layer, pp_group, layers)
    finally:
        patcher.undo()


def causal_lm_shell(class_name: str, model: nn.Module, module: str = DEEPSEEK_V2) -> nn.Module:
    """A causal-LM instance (``DeepseekV2ForCausalLM`` by default) whose only state is ``model``.

    The real ``__init__`` would build an LM head and load a full config; the EAGLE-3
    methods only touch ``self.model``, so the instance is made with ``object.__new__``.
    """
    cls = getattr(importlib.import_module(module), class_name)
    shell = object.__new__(cls)
    nn.Module.__init__(shell)
    shell.model = model
    return shell


# --------------------------------------------------------------------------- speculative gate


def _field_default(field_: dataclasses.Field[Any]) -> Any:
    """A dataclass field's default; pydantic ``Field(...)`` defaults are unwrapped."""
    default = field_.default
    if default is dataclasses.MISSING:
        if field_.default_factory is not dataclasses.MISSING:
            return field_.default_factory()
        return None
    get_default = getattr(default, "get_default", None)  # pydantic FieldInfo
    if callable(get_default):
        return get_default(call_default_factory=True)
    return default


def speculative_config_for(target_model_type: str, method: str = "eagle3") -> Any:
    """A ``SpeculativeConfig`` (the release's class) ready for its ``_verify_args`` check.

    Constructing one for real loads the draft model's Hugging Face config, which needs
    files or a network; instead the instance is made with ``object.__new__``, every
    dataclass field set to its default, then the few fields the check reads are set: an
    EAGLE-3 method, a positive token count, no draft model config, and a target model
    config whose ``hf_text_config.model_type`` is ``target_model_type``.
    """
    from vllm.config import SpeculativeConfig

    config = object.__new__(SpeculativeConfig)
    values = {f.name: _field_default(f) for f in dataclasses.fields(SpeculativeConfig)}
    values.update(
        method=method,
        num_speculative_tokens=3,
        draft_model_config=None,
        target_model_config=types.SimpleNamespace(hf_text_config=types.SimpleNamespace(model_type=target_model_type)),
    )
    for name, value in values.items():
        object.__setattr__(config, name, value)
    return config


def run_speculative_gate(target_model_type: str) -> None:
    """Run the release's real ``SpeculativeConfig._verify_args`` (where the gate lives in
    every release 0.8.5-0.17.1); raises ``ValueError`` if the target type is rejected."""
    from vllm.config import SpeculativeConfig

    SpeculativeConfig._verify_args(speculative_config_for(target_model_type))
