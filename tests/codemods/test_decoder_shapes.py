"""The loop shapes the rule meets across vLLM's registry, patched and then *run*: synthetic sources
(no vLLM code here) executed with stand-in layers that compute on plain numbers.

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

import libcst as cst
import pytest
from helpers.toy_family import reader

from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.target import Options, State
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3, DecoderTarget

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

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

SHAPES = {
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
    "range-bound-h": (
        "i",
        "range(self.start_layer, self.end_layer)",
        ["layer = self.h[i]", SINGLE_CALL],
        SINGLE_PP_TAIL,
        "h",
    ),
    "no-pipeline-enumerate": ("i, layer", "enumerate(self.layers)", [PAIR_CALL], RETURN_NORM_TAIL, "layers"),
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


def source(shape: str, decoder: str = "model") -> str:
    target, iterable, body, tail, _ = SHAPES[shape]
    lines = "\n".join(f"            {line}" for line in body)
    code = TEMPLATE.format(target=target, iterable=iterable, body=lines, tail=tail, decoder=decoder)
    if "aux_hidden_states" in lines:  # upstream's own capture collects into its own list
        code = code.replace("        residual = None\n", "        residual = None\n        aux_hidden_states = []\n")
    return code


def family(decoder: str = "self.model", causal_lm: str = "ToyForCausalLM") -> Family:
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
    layers_attribute, pair = SHAPES[shape][4], PAIR_CALL in SHAPES[shape][2]
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


@pytest.mark.parametrize("shape", SHAPES)
def test_the_patched_loop_captures_the_stream_entering_each_id_and_id_n(shape):
    original = source(shape)
    patched = DecoderEagle3(family(), protocol=False).transform_module(cst.parse_module(original)).code
    plain, _ = run(original, shape, ())
    unchanged, _ = run(patched, shape, ())
    assert unchanged == plain  # nothing captured: the unpatched result, not a pair
    (output, states), received = run(patched, shape, (0, 3, N))
    assert output == plain
    assert states == [received[0], received[3], last_stream(original, shape)]


@pytest.mark.parametrize("shape", ["pair-islice", "single-h-gpt2", "no-pipeline-single"])
def test_the_methods_reach_the_decoder_under_its_own_attributes(shape):
    """``self.model.h``, ``self.model.layers``; no pipeline check where there is no stage."""
    decoder = "model"
    patched = DecoderEagle3(family(f"self.{decoder}"), protocol=False, getter="get_ids").transform_module(
        cst.parse_module(source(shape, decoder))
    )
    namespace = load(patched.code)
    causal_lm = object.__new__(namespace["ToyForCausalLM"])
    inner = types.SimpleNamespace(start_layer=0, aux_hidden_state_layers=())
    setattr(inner, SHAPES[shape][4], [None] * 61)
    setattr(causal_lm, decoder, inner)
    causal_lm.set_aux_hidden_state_layers((1, 2, 3))
    assert inner.aux_hidden_state_layers == (1, 2, 3)
    assert causal_lm.get_ids() == (2, 30, 58)
    assert ("start_layer" in patched.code) == (shape != "no-pipeline-single")


def test_two_causal_lms_holding_one_model_patch_it_once():
    target = DecoderTarget(family(), family(causal_lm="ToyChatForCausalLM"))
    verdict = target.examine(source("pair-islice"), reader(), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    code = verdict.patched
    assert code.count("aux_layer_ids = self.aux_hidden_state_layers") == 1
    assert code.count(IMPORT) == 1
    namespace = load(code.replace(IMPORT, ""), Eagle3)
    for causal_lm in ("ToyForCausalLM", "ToyChatForCausalLM"):
        assert Eagle3 in namespace[causal_lm].__mro__
        assert "set_aux_hidden_state_layers" in vars(namespace[causal_lm])


class Eagle3:
    """Stands in for vLLM's ``SupportsEagle3`` protocol."""


class VocabParallelEmbedding:
    """Stands in for vLLM's token embedding."""


NESTED = """

class ToyOuterModel(nn.Module):

    def __init__(self):
        super().__init__()
        self.decoder = ToyModel()
"""


def proposer_embedding(causal_lm: Any) -> Any:
    """The embedding vLLM's EAGLE proposer takes from the target (``_maybe_share_embeddings``), or its error."""
    inner = getattr(causal_lm, "model", None)
    if inner is None:
        raise AttributeError("Target model does not have 'model' attribute")
    if hasattr(inner, "embed_tokens"):
        return inner.embed_tokens
    if hasattr(inner, "embedding"):
        return inner.embedding
    raise AttributeError("Target model does not have 'embed_tokens' or 'embedding' attribute")


EMBEDDING_LAYOUTS = {
    # name: (source, family's decoder, where the embedding really is)
    "gpt2-transformer-wte": (
        source("single-h-gpt2", decoder="transformer").replace(
            "self.embed_tokens = None", "self.wte = VocabParallelEmbedding()"
        ),
        "self.transformer",
        "transformer.wte",
    ),
    "mamba-backbone-embeddings": (
        source("no-pipeline-single", decoder="backbone").replace(
            "self.embed_tokens = None", "self.embeddings = VocabParallelEmbedding()"
        ),
        "self.backbone",
        "backbone.embeddings",
    ),
    "ling-model-word-embeddings": (
        source("pair-islice").replace("self.embed_tokens = None", "self.word_embeddings = VocabParallelEmbedding()"),
        "self.model",
        "model.word_embeddings",
    ),
    "opt-model-decoder-embed-tokens": (
        (source("pair-islice") + NESTED).replace("self.model = ToyModel()", "self.model = ToyOuterModel()"),
        "self.model.decoder",
        "model.decoder.embed_tokens",
    ),
    "chatglm-transformer-embedding": (
        (source("pair-islice") + NESTED)
        .replace("self.model = ToyModel()", "self.transformer = ToyOuterModel()")
        .replace("self.decoder = ToyModel()", "self.decoder = ToyModel()\n        self.embedding = None"),
        "self.transformer.decoder",
        "transformer.embedding",
    ),
}


@pytest.mark.parametrize("layout", EMBEDDING_LAYOUTS)
def test_the_proposer_finds_the_embedding_in_every_layout(layout):
    """vLLM's proposers share ``target.model.embed_tokens`` (or ``.embedding``) with the drafter and raise
    without it: the patched target shows them its own embedding, the very object, wherever it is kept."""
    code, decoder, where = EMBEDDING_LAYOUTS[layout]
    namespace = {"VocabParallelEmbedding": VocabParallelEmbedding}
    with pytest.raises(AttributeError):  # as vLLM wrote it, the proposer fails
        proposer_embedding(load(code, extra=namespace)["ToyForCausalLM"]())
    verdict = DecoderTarget(family(decoder=decoder)).examine(code, reader(), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    causal_lm = load(verdict.patched.replace(IMPORT, ""), Eagle3, extra=namespace)["ToyForCausalLM"]()
    embedding = causal_lm
    for attribute in where.split("."):
        embedding = getattr(embedding, attribute)
    assert proposer_embedding(causal_lm) is embedding


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("        self.embed_tokens = None\n", ""), "ToyModel builds no token embedding"),
        (
            (
                "self.embed_tokens = None",
                "self.wte = VocabParallelEmbedding()\n        self.wpe = VocabParallelEmbedding()",
            ),
            "ToyModel builds several token embeddings (wte, wpe)",
        ),
    ],
    ids=["no-embedding", "two-embeddings"],
)
def test_a_target_whose_embedding_is_not_clear_is_refused(change, reason):
    verdict = DecoderTarget(family()).examine(source("pair-islice").replace(*change), reader(), Options())
    assert verdict.state is State.UNSUPPORTED and reason in verdict.reason, verdict.reason


def test_a_causal_lm_keeping_something_else_in_self_model_is_refused():
    code = source("single-h-gpt2", decoder="transformer").replace(
        "self.transformer = ToyModel()\n", "self.transformer = ToyModel()\n        self.model = None\n", 1
    )
    verdict = DecoderTarget(family(decoder="self.transformer")).examine(code, reader(), Options())
    assert verdict.state is State.UNSUPPORTED and "something else in self.model" in verdict.reason, verdict.reason


class StreamLayer:
    """Returns ``(the new stream, something else)``: StableLM's layers (not handed a residual) and EXAONE-4's
    (handed one, never reading it) both add their residual themselves.  Writes into its inputs once read."""

    def __init__(self, index: int, received: list[Stream], outputs: list[Stream]) -> None:
        self.index, self.received, self.outputs = index, received, outputs

    def __call__(self, positions: Any, hidden_states: Stream, residual: Any = None) -> tuple[Stream, Stream]:
        self.received.append(hidden_states.clone())
        self.outputs.append(hidden_states * (self.index + 2) + 1.0)
        output = self.outputs[-1].clone(), hidden_states.clone()
        scribble(hidden_states, residual)
        return output


EXAONE_LAYER = """

class ToyDecoderLayer(nn.Module):

    def forward(self, positions, hidden_states, residual):
        residual = hidden_states
        hidden_states = residual + self.mlp(hidden_states)
        return hidden_states, residual
"""


@pytest.mark.parametrize(
    "code",
    [
        source("pair-islice").replace(PAIR_CALL, "hidden_states, residual = layer(positions, hidden_states)"),
        source("pair-islice").replace("self.embed_tokens = None", "self.embed_tokens = None\n        ToyDecoderLayer()")
        + EXAONE_LAYER,
    ],
    ids=["not-handed-the-residual", "never-reads-the-residual"],
)
def test_layers_that_add_their_own_residual_hand_on_the_stream_in_hidden_states(code):
    """The stream is what the next layer is given: ``hidden_states`` alone, when the layers are not handed
    the residual (StableLM) or never read it (EXAONE-4's post-norm layers)."""
    target = DecoderTarget(family())
    verdict = target.examine(code, reader(), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    patched = verdict.patched.replace(IMPORT, "")
    model = object.__new__(load(patched)["ToyModel"])
    received: list[Stream] = []
    outputs: list[Stream] = []
    model.layers = [StreamLayer(i, received, outputs) for i in range(N)]
    model.start_layer, model.end_layer = 0, N
    model.norm = lambda h, r: (h * 0.5, None)
    model.aux_hidden_state_layers = (0, 3, N)
    _, states = model.forward(None, Stream(1.0))
    assert states == [received[0], received[3], outputs[-1]]
