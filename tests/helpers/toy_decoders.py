"""Synthetic decoders in the loop shapes the rule meets across vLLM's registry, and what runs them patched:
stand-in layers that compute on plain numbers (no vLLM code here).

Each case checks this tool's semantics: id ``k`` is the residual stream entering layer ``k``
(``hidden_states + residual`` for layers that hand the residual on, ``hidden_states`` for layers
that add it themselves), id ``n`` the last layer's output, and no ids means the unpatched result.
The stand-in layers write into their inputs once they have read them, as vLLM's fused kernels do
(``fused_add_rms_norm`` into its residual, Falcon's ``residual += attention_output``): a capture
that keeps the bare tensor instead of a copy hands the drafter what the layer left there.
"""

from __future__ import annotations

import itertools
import types
from typing import Any, Optional

from vllm_eagle3_patch.codemod.family import Family

N = 6
IMPORT = "from vllm.model_executor.models.interfaces import SupportsEagle3"
PAIR_CALL = "hidden_states, residual = layer(positions, hidden_states, residual)"
SINGLE_CALL = "hidden_states = layer(positions, hidden_states)"

TEMPLATE = """\
class ToyModel(nn.Module):

    def __init__(self):
        super().__init__()
        self.embed_tokens = None

    def forward(self, positions, hidden_states):
        residual = None
        for {target} in {iterable}:
{body}
{tail}


class ToyForCausalLM(nn.Module):

    def __init__(self):
        super().__init__()
        self.{decoder} = ToyModel()


class ToyChatForCausalLM(nn.Module):

    def __init__(self):
        super().__init__()
        self.{decoder} = ToyModel()
"""

PP_TAIL = """\
        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states"""

SINGLE_PP_TAIL = """\
        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states"""

RETURN_NORM_TAIL = "        return self.norm(hidden_states, residual)[0]"
SINGLE_RETURN_NORM_TAIL = "        return self.ln_f(hidden_states)"

UPSTREAM_RETURN = (
    "        if aux_hidden_states:\n            return hidden_states, aux_hidden_states\n        return hidden_states"
)

LOOPS = {
    # name: (loop target, iterable, loop body, tail, the layers' attribute)
    "pair-islice": ("layer", "islice(self.layers, self.start_layer, self.end_layer)", [PAIR_CALL], PP_TAIL, "layers"),
    "single-h-gpt2": ("layer", "islice(self.h, self.start_layer, self.end_layer)", [SINGLE_CALL], SINGLE_PP_TAIL, "h"),
    "single-blocks-slice": (
        "block",
        "self.blocks[self.start_layer:self.end_layer]",
        ["hidden_states = block(positions, hidden_states)"],
        SINGLE_PP_TAIL,
        "blocks",
    ),
    "local-enumerate": (
        "idx, layer",
        "enumerate(islice(self.layers, self.start_layer, self.end_layer))",
        [PAIR_CALL],
        PP_TAIL,
        "layers",
    ),
    "global-enumerate": (
        "i, layer",
        "enumerate(islice(self.layers, self.start_layer, self.end_layer), self.start_layer)",
        [PAIR_CALL],
        PP_TAIL,
        "layers",
    ),
    "range-bound-h": (
        "i",
        "range(self.start_layer, self.end_layer)",
        ["layer = self.h[i]", SINGLE_CALL],
        SINGLE_PP_TAIL,
        "h",
    ),
    "no-pipeline-enumerate": ("i, layer", "enumerate(self.layers)", [PAIR_CALL], RETURN_NORM_TAIL, "layers"),
    "no-pipeline-enumerate-from-1": (
        "number, layer",
        "enumerate(self.layers, start=1)",
        [SINGLE_CALL],
        SINGLE_RETURN_NORM_TAIL,
        "layers",
    ),
    "no-pipeline-single": ("layer", "self.layers", [SINGLE_CALL], SINGLE_RETURN_NORM_TAIL, "layers"),
    "output-handed-on": (  # Zamba2: the layer's output is handed to the next layer under another name
        "i, layer",
        "enumerate(self.layers)",
        ["layer_outputs = layer(positions, hidden_states)", "hidden_states = layer_outputs"],
        SINGLE_RETURN_NORM_TAIL,
        "layers",
    ),
    "upstream-capture-local-ids": (  # Arcee, Step-1: upstream's capture adds a None residual at layer 0
        "idx, layer",
        "enumerate(islice(self.layers, self.start_layer, self.end_layer))",
        [
            "if idx in self.aux_hidden_state_layers:",
            "    aux_hidden_states.append(hidden_states + residual)",
            PAIR_CALL,
        ],
        PP_TAIL.replace("        return hidden_states", UPSTREAM_RETURN),
        "layers",
    ),
}


def toy_source(shape: str, decoder: str = "model") -> str:
    target, iterable, body, tail, _ = LOOPS[shape]
    lines = "\n".join(f"            {line}" for line in body)
    code = TEMPLATE.format(target=target, iterable=iterable, body=lines, tail=tail, decoder=decoder)
    if "aux_hidden_states" in lines:  # upstream's own capture collects into its own list
        code = code.replace("        residual = None\n", "        residual = None\n        aux_hidden_states = []\n")
    return code


def toy_family(decoder: str = "self.model", causal_lm: str = "ToyForCausalLM") -> Family:
    return Family("Toy", "model_executor/models/toy.py", "ToyModel", causal_lm, ("toy",), decoder=decoder)


class Stream:
    """A number that a layer can write into in place, as vLLM's fused kernels write into their inputs."""

    def __init__(self, value: float) -> None:
        self.value = value

    def clone(self) -> Stream:
        return Stream(self.value)

    def scribble(self) -> None:
        """What a layer leaves in an input it has read: anything but the stream it was."""
        self.value = -1000.0 - self.value

    def __add__(self, other: Any) -> Stream:
        return Stream(self.value + _value(other))

    __radd__ = __add__

    def __mul__(self, other: Any) -> Stream:
        return Stream(self.value * _value(other))

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (Stream, int, float)) and self.value == _value(other)

    def __repr__(self) -> str:
        return f"Stream({self.value})"


def _value(number: Any) -> float:
    return number.value if isinstance(number, Stream) else number


def scribble(*inputs: Any) -> None:
    for tensor in inputs:
        if isinstance(tensor, Stream):
            tensor.scribble()


class PairLayer:
    """Hands the residual on: returns ``(h * (i + 2), residual + h)``; records the stream it was given,
    then writes into its inputs."""

    def __init__(self, index: int, received: list[Stream]) -> None:
        self.index, self.received = index, received

    def __call__(self, positions: Any, hidden_states: Stream, residual: Any = None) -> tuple[Stream, Stream]:
        self.received.append(hidden_states.clone() if residual is None else hidden_states + residual)
        output = hidden_states * (self.index + 2), (residual or 0.0) + hidden_states
        scribble(hidden_states, residual)
        return output


class SingleLayer:
    """Adds its residual itself: returns the new stream ``h * (i + 2) + 1``, then writes into its input."""

    def __init__(self, index: int, received: list[Stream]) -> None:
        self.index, self.received = index, received

    def __call__(self, positions: Any, hidden_states: Stream) -> Stream:
        self.received.append(hidden_states.clone())
        output = hidden_states * (self.index + 2) + 1.0
        scribble(hidden_states)
        return output


def load(code: str, protocol: type = object, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Execute a (patched) toy module with stand-ins for what vLLM's files import."""
    namespace: dict[str, Any] = {
        **(extra or {}),
        "SupportsEagle3": protocol,
        "nn": types.SimpleNamespace(Module=type("Module", (), {})),
        "islice": itertools.islice,
        "get_pp_group": lambda: types.SimpleNamespace(is_last_rank=True),
        "IntermediateTensors": tuple,
    }
    exec(compile(code, "<toy>", "exec"), namespace)  # noqa: S102 - synthetic test source
    return namespace


def run(code: str, shape: str, ids: tuple[int, ...]) -> tuple[Any, list[float]]:
    layers_attribute, pair = LOOPS[shape][4], PAIR_CALL in LOOPS[shape][2]
    model = object.__new__(load(code)["ToyModel"])
    received: list[Stream] = []
    layer = PairLayer if pair else SingleLayer
    setattr(model, layers_attribute, [layer(i, received) for i in range(N)])
    model.start_layer, model.end_layer = 0, N
    model.norm = lambda h, r: ((h + (r or 0.0)) * 0.5, None)  # fused add-norm: the stream, halved
    model.ln_f = lambda h: h * 0.5
    model.aux_hidden_state_layers = ids
    return model.forward(None, Stream(1.0)), received


def last_stream(code: str, shape: str) -> float:
    """The stream after the last layer, from an unpatched run: the norm halves it."""
    output, _ = run(code, shape, ())
    return output * 2


class Eagle3:
    """Stands in for vLLM's ``SupportsEagle3`` protocol."""
