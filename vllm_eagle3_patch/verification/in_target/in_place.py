"""Run a patched decoder's real ``forward`` over stand-in layers that write into their inputs, as vLLM's
fused kernels do, and see which states its capture hands the drafter.

vLLM's layers may write into the tensors they are given once they have read them: ``fused_add_rms_norm``
adds into its residual argument (the default on a GPU), Falcon's layer does ``residual += attention_output``
into the tensor it was handed.  A capture that keeps the bare tensor then hands the drafter what the layers
left in it.  :class:`InPlaceLayer` reads its inputs, records the stream it was given, then scribbles over
them; :class:`InPlaceNorm` is the fused add-norm, in place.  The decoder is a bare instance of the release's
own class (no ``__init__``: it needs a GPU and a config); what its ``forward`` reads beyond the layers and the
norm answers :class:`Neutral` (one, or a zero tensor where it is called).  How the loop calls its layers is
read from the forward's own source with :mod:`ast`.

Run in the target interpreter (it imports torch and vLLM, never this tool): by ``verify``
(``stand_in_checks.py``) and by the inner suite (``tests/inside_vllm/test_every_target.py``), one check.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torch import nn

if TYPE_CHECKING:
    from typing_extensions import TypeGuard  # typing's from Python 3.10; only read by the type checker

NUM_LAYERS = 6
HIDDEN_SIZE = 4
NUM_TOKENS = 3
IDS = (0, NUM_LAYERS // 2, NUM_LAYERS)
"""The ids checked: the stream entering layers 0 and n/2, and leaving the last layer (id n)."""
LEFT_OUT = ("project_in", "project_out")
"""Modules a config may leave out, which the forward then skips (``if self.project_in is not None``: OPT's)."""


class InPlaceLayer(nn.Module):
    """Layer ``i``: records the stream it is given (``hidden_states + residual``, or ``hidden_states``), returns
    ``stream * (1 + (i + 1) / 4) + i + 1`` (beside a zero residual where the loop takes a pair, so the stream
    leaving is the same whether or not the model's layers read their residual), then writes into its inputs."""

    def __init__(self, index: int, returns_pair: bool, log: dict[tuple[str, int], torch.Tensor]) -> None:
        super().__init__()
        self.index, self.returns_pair, self.log = index, returns_pair, log

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        hidden_states, residual = _hidden_and_residual(args, kwargs)
        stream = hidden_states.clone() if residual is None else hidden_states + residual
        self.log["in", self.index] = stream.clone()
        output = stream * (1.0 + 0.25 * (self.index + 1)) + (self.index + 1)
        self.log["out", self.index] = output.clone()
        hidden_states.mul_(-3.0).add_(100.0)  # what a fused kernel leaves in its inputs
        if residual is not None:
            residual.mul_(7.0).sub_(50.0)
        return (output, torch.zeros_like(output)) if self.returns_pair else output

    def _add_for_residual(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """A layer's own residual add, which a forward may call after the loop (Step5's, 0.34.0)."""
        return hidden_states + residual


def _hidden_and_residual(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, Any]:
    """The hidden states are the first floating-point tensor (positions are integers), the residual the next
    argument that is one or None; or both by keyword."""
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"], kwargs.get("residual")
    floating = [a is None or (isinstance(a, torch.Tensor) and a.is_floating_point()) for a in args]
    at = next(i for i, a in enumerate(args) if a is not None and floating[i])
    later = [args[i] for i in range(at + 1, len(args)) if floating[i]]
    return args[at], later[0] if later else kwargs.get("residual")


class InPlaceNorm(nn.Module):
    """The final norm: with a residual, vLLM's fused add-norm, which writes the sum into the residual and the
    normed sum into the hidden states; without, a new tensor.  Its ``weight`` is there for a forward that reads
    its dtype (Zaya's)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN_SIZE))

    def forward(self, hidden_states: torch.Tensor, residual: Any = None, *args: Any, **kwargs: Any) -> Any:
        if residual is None:
            return hidden_states * 0.5 - 0.25
        residual.add_(hidden_states)
        hidden_states.copy_(residual * 0.5 - 0.25)
        return hidden_states, residual


class Neutral(float):
    """What the forward reads that the test does not build (``self.config.embedding_multiplier``,
    ``self.wpe(positions)``, a skip-connection table): one, a zero tensor where called, empty where iterated."""

    def __new__(cls) -> Neutral:
        return float.__new__(cls, 1.0)

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.zeros(NUM_TOKENS, HIDDEN_SIZE)

    def __getattr__(self, name: str) -> Neutral:
        return Neutral()

    def __getitem__(self, key: Any) -> Neutral:
        return Neutral()

    def __contains__(self, item: Any) -> bool:
        return False

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False


class NeutralConfig(types.SimpleNamespace):
    def __getattr__(self, name: str) -> Neutral:
        return Neutral()


@dataclass(frozen=True)
class Loop:
    """How the decoder's ``forward`` runs its layers, read from its source."""

    layers: str
    """The attribute holding the layers (``layers``, ``h``, ``blocks``)."""
    returns_pair: bool
    """The loop unpacks ``hidden_states, residual = layer(...)``."""
    norms: tuple[str, ...]
    """Attributes called after the loop whose names say norm (``norm``, ``ln_f``, ``final_layernorm``)."""


def read_loop(cls: type[nn.Module]) -> Loop:
    """The loop calling a layer: the loop's own variable (``for layer in ...``), or a name its body binds to
    one of the layers (``layer = self.layers[i]``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    for loop in (node for node in ast.walk(tree) if isinstance(node, ast.For)):
        looped = [n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)][-1:]
        bound = {
            node.targets[0].id: node.value.value.attr
            for node in ast.walk(loop)
            if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Subscript)
            and _is_self_attribute(node.value.value)
        }
        calls = [
            (node, node.value.func.id)
            for node in ast.walk(loop)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in (*looped, *bound)
        ]
        if not calls:
            continue
        call, callee = calls[0]
        stage = ("start_layer", "end_layer")
        layers = bound.get(callee) or next(
            n.attr for n in ast.walk(loop.iter) if _is_self_attribute(n) and n.attr not in stage
        )
        end = loop.end_lineno or loop.lineno  # always set by the parser
        after = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n, "lineno", 0) > end]
        norms = {
            n.func.attr
            for n in after
            if _is_self_attribute(n.func) and ("norm" in n.func.attr.lower() or n.func.attr.startswith("ln"))
        }
        return Loop(layers, isinstance(call.targets[0], ast.Tuple), tuple(sorted(norms)))
    raise AssertionError(f"{cls.__name__}.forward has no loop calling its layers")


def _is_self_attribute(node: ast.AST) -> TypeGuard[ast.Attribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


@dataclass(frozen=True)
class Captured:
    states: list[torch.Tensor]
    entering: dict[int, torch.Tensor]
    """The stream each layer was given, by global id."""
    leaving: torch.Tensor
    """The stream leaving the last layer (what id n names)."""


def run_decoder(
    module_name: str, model_name: str, ids: tuple[int, ...] = IDS, wire: Optional[Callable[[nn.Module], None]] = None
) -> Captured:
    """The patched decoder ``model_name`` of ``module_name`` on one pipeline stage of :data:`NUM_LAYERS`
    in-place layers, asked for ``ids``; or, with ``wire``, asked for what ``wire(decoder)`` sets (a runner's own
    code, through the causal LM holding the decoder)."""
    module = importlib.import_module(module_name)
    cls = getattr(module, model_name)
    loop = read_loop(cls)
    model = _bare(cls)
    log: dict[tuple[str, int], torch.Tensor] = {}
    setattr(model, loop.layers, nn.ModuleList(InPlaceLayer(i, loop.returns_pair, log) for i in range(NUM_LAYERS)))
    for name in loop.norms:
        setattr(model, name, InPlaceNorm())
    for name in LEFT_OUT:
        setattr(model, name, None)
    model.start_layer, model.end_layer = 0, NUM_LAYERS
    model.config = NeutralConfig(hidden_size=HIDDEN_SIZE)
    model.aux_hidden_state_layers = ids
    if wire is not None:
        wire(model)
    embeds = torch.arange(NUM_TOKENS * HIDDEN_SIZE, dtype=torch.float32).reshape(NUM_TOKENS, HIDDEN_SIZE) / 4 - 1
    with one_stage(module, importlib.import_module(cls.forward.__module__)):
        output = model.forward(**_arguments(cls, embeds))
    assert isinstance(output, tuple) and len(output) == 2, f"{model_name}.forward returned {type(output).__name__}"
    assert len([k for k in log if k[0] == "in"]) == NUM_LAYERS, f"{len(log) // 2} of {NUM_LAYERS} layers ran"
    entering = {index: log["in", index] for index in range(NUM_LAYERS)}
    return Captured(list(output[1]), entering, log["out", NUM_LAYERS - 1])


def _bare(cls: type[nn.Module]) -> nn.Module:
    """An instance without ``__init__``, whose missing attributes answer :class:`Neutral`."""

    def missing(self: nn.Module, name: str) -> Any:
        try:
            return nn.Module.__getattr__(self, name)
        except AttributeError:
            if name.startswith("_"):
                raise
            return Neutral()

    instance: nn.Module = object.__new__(type(cls.__name__, (cls,), {"__getattr__": missing}))
    nn.Module.__init__(instance)
    return instance


def _arguments(cls: type[nn.Module], embeds: torch.Tensor) -> dict[str, Any]:
    """``forward``'s arguments by name: the embeddings where it takes them (``inputs_embeds``, or the hidden
    states of a nested decoder), positions, and None for the rest it requires."""
    arguments: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.forward).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if "embed" in name or name == "hidden_states":
            arguments[name] = embeds.clone()
        elif name.startswith("position"):
            arguments[name] = torch.arange(NUM_TOKENS)
        elif parameter.default is parameter.empty:
            arguments[name] = None
    return arguments


@contextlib.contextmanager
def one_stage(*modules: types.ModuleType) -> Iterator[None]:
    """One pipeline stage holding every layer, and a forward context with no attention metadata: what the
    modules' ``get_pp_group`` and ``get_forward_context`` answer while the forward runs."""
    group = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)
    context = types.SimpleNamespace(attn_metadata=None, virtual_engine=0)
    stand_ins = {"get_pp_group": lambda: group, "get_forward_context": lambda: context}
    saved = [(m, name, getattr(m, name)) for m in set(modules) for name in stand_ins if hasattr(m, name)]
    try:
        for module, name, _ in saved:
            setattr(module, name, stand_ins[name])
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def check_stream(module_name: str, model_name: str) -> str:
    """The check: ids 0, n/2 and n hand back the stream entering those layers (n: leaving the last one)."""
    captured = run_decoder(module_name, model_name)
    expected = [captured.entering[i] if i < NUM_LAYERS else captured.leaving for i in IDS]
    assert len(captured.states) == len(expected), f"captured {len(captured.states)} states for ids {IDS}"
    wrong = [i for i, got, want in zip(IDS, captured.states, expected) if not torch.equal(got, want)]
    assert not wrong, f"ids {wrong} are not the stream entering those layers as it was"
    return f"ids {', '.join(map(str, IDS))} are the stream entering those layers, under layers writing into it"
