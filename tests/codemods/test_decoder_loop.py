"""The decoder loop: its shapes (``eagle3/loop_shapes.py``), found and read by ``patches/decoder_loop.py``.

Synthetic decoders in each shape, patched and then *run* with stand-in layers (``toy_decoders.py``), and edge
cases of the loop on the codemod's template (``decoder_sources.py``).  No vLLM code here.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
import pytest
from helpers.decoder_sources import (
    ISLICE_LOOP,
    NORM_IN_ELSE_TAIL,
    NORM_TAIL,
    RANGE_LOOP,
    SLICE_LOOP,
    TOY,
    patch,
    reader,
    source,
)
from helpers.toy_decoders import (
    IMPORT,
    LOOPS,
    PAIR_CALL,
    N,
    Stream,
    last_stream,
    load,
    run,
    scribble,
    toy_family,
    toy_source,
)

from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.eagle3 import loop_shapes
from vllm_eagle3_patch.eagle3.class_chain import ChainReader
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3, DecoderPatch
from vllm_eagle3_patch.patches.decoder_loop import loop_shape, read_forward

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


@pytest.mark.parametrize("shape", LOOPS)
def test_the_patched_loop_captures_the_stream_entering_each_id_and_id_n(shape):
    original = toy_source(shape)
    patched = DecoderEagle3(toy_family(), protocol=False).transform_module(cst.parse_module(original)).code
    plain, _ = run(original, shape, ())
    unchanged, _ = run(patched, shape, ())
    assert unchanged == plain  # nothing captured: the unpatched result, not a pair
    (output, states), received = run(patched, shape, (0, 3, N))
    assert output == plain
    assert states == [received[0], received[3], last_stream(original, shape)]


def toy_loop(case: str) -> cst.For:
    """The loop of a toy decoder, in the codemod's tree."""
    model = cst.parse_module(toy_source(case)).body[0]
    return read_forward(model).loop.node  # type: ignore[arg-type]


def test_every_loop_shape_has_a_case_run_here():
    """Adding a shape to ``loop_shapes.SHAPES`` asks for its case in ``toy_decoders.LOOPS``."""
    run_here = {loop_shape(toy_loop(case)).shape.name for case in LOOPS}  # type: ignore[union-attr]
    assert run_here == {shape.name for shape in loop_shapes.SHAPES}


STAGED_INIT = "        self.embed_tokens = None\n        self.start_layer, self.end_layer = 0, 6\n"


@pytest.mark.parametrize(
    ("case", "runs_the_decoder"),
    [("no-pipeline-single", False), ("no-pipeline-enumerate", True), ("no-pipeline-enumerate-from-1", False)],
)
def test_a_staged_model_runs_all_its_layers_only_where_it_numbers_them_from_0(case, runs_the_decoder):
    """With pipeline stages, ``for layer in self.layers`` is not the decoder's loop; the hybrid models'
    ``for i, layer in enumerate(self.layers)`` is (global ids)."""
    staged = toy_source(case).replace("        self.embed_tokens = None\n", STAGED_INIT, 1)
    verdict = DecoderPatch(toy_family()).examine(staged, reader(), Options())
    assert (verdict.state is State.UNPATCHED) is runs_the_decoder, verdict.reason


def test_the_class_chain_takes_a_class_with_a_loop_where_a_decoder_loop_stands_for_the_decoder():
    """Which class is the decoder is decided by where its loop stands (a top-level ``for`` of ``forward``);
    whether the loop has a shape the codemod follows is the codemod's to say, with its reason."""
    elsewhere = toy_source("pair-islice").replace("islice(self.layers, self.start_layer, self.end_layer)", "self.heads")
    nested = toy_source("pair-islice").replace("        for layer in", "        if True:\n          for layer in")
    for code, loops in ((toy_source("pair-islice"), True), (elsewhere, True), (nested, False)):
        chains = ChainReader({"model_executor/models/toy.py": code}.get)
        assert chains.chain("model_executor.models.toy", "ToyModel").classes[0].loops is loops  # type: ignore[union-attr]
    verdict = DecoderPatch(toy_family()).examine(elsewhere, reader(), Options())
    assert verdict.state is State.UNSUPPORTED and "expected a loop over self.layers" in verdict.reason


def test_enumerated_loop_without_upstream_capture_keeps_its_index() -> None:
    """``for i, layer in enumerate(<own layers>, start=self.start_layer)``: ``i`` is the global id."""
    loop = (
        "        for layer_idx, layer in enumerate(\n"
        "            islice(self.layers, self.start_layer, self.end_layer),\n"
        "            start=self.start_layer,\n"
        "        ):\n"
        "            hidden_states, residual = layer(hidden_states, residual)"
    )
    after = patch(source(loop=loop))
    assert "            if layer_idx in aux_layer_ids:  # vllm-eagle3-patch\n" in after
    assert "aux_layer_idx" not in after


def test_range_loop_uses_its_own_index() -> None:
    after = patch(source(loop=RANGE_LOOP))
    assert (
        "        for i in range(self.start_layer, self.end_layer):\n"
        "            if i in aux_layer_ids:  # vllm-eagle3-patch\n"
        "                aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)\n"
        "            layer = self.layers[i]\n"
    ) in after
    assert "enumerate" not in after and "aux_layer_idx" not in after


def test_slice_loop_with_a_multi_line_call() -> None:
    after = patch(source(loop=SLICE_LOOP))
    assert (
        "for aux_layer_idx, layer in enumerate(self.layers[self.start_layer:self.end_layer], "
        "start=self.start_layer):  # vllm-eagle3-patch"
    ) in after
    assert "                **kwargs,\n            )\n" in after


def test_norm_inside_an_else_branch() -> None:
    """The last-rank norm under ``else:`` (Bailing MoE 0.17): the final capture goes before that statement."""
    after = patch(source(tail=NORM_IN_ELSE_TAIL))
    capture = after.index("if self.end_layer in aux_layer_ids:")
    assert capture < after.index("if not get_pp_group().is_last_rank:") < after.index("if aux_hidden_states:")
    assert after.index("if not get_pp_group().is_last_rank:") < after.index("hidden_states = self.norm(hidden_states)")
    compile(after, "<patched>", "exec")


def test_slice_loop_and_four_argument_call_keep_their_names():
    loop = """\
        for block in self.layers[self.start_layer:self.end_layer]:
            h, r = block(positions, h, r, llama_4_scaling)"""
    code = source(loop=loop).replace("hidden_states, residual = intermediate_tensors", "h, r = intermediate_tensors")
    code = code.replace("self.norm(hidden_states, residual)", "self.norm(h, r)").replace(
        "return hidden_states\n\n\nclass", "return h\n\n\nclass"
    )
    code = code.replace("hidden_states, _ = self.norm", "h, _ = self.norm")
    out = patch(code)
    assert (
        "for aux_layer_idx, block in enumerate(self.layers[self.start_layer:self.end_layer], start=self.start_layer):"
        in out
    )
    assert "aux_hidden_states.append(h.clone() if r is None else h + r)" in out
    assert "return h, aux_hidden_states" in out
    compile(out, "patched", "exec")


REFUSED = [
    pytest.param(source(loop="        pass"), "a loop over self.layers", id="no-loop"),
    pytest.param(source(loop=ISLICE_LOOP + "\n" + ISLICE_LOOP), "a loop over self.layers", id="two-loops"),
    pytest.param(
        source(loop=ISLICE_LOOP.replace("self.start_layer, self.end_layer", "0, self.end_layer")),
        "a loop over self.layers",
        id="loop-from-zero",
    ),
    pytest.param(
        source(loop=RANGE_LOOP.replace("            layer = self.layers[i]\n", "")),
        "a loop over self.layers",
        id="range-without-layer",
    ),
    pytest.param(
        source(loop=RANGE_LOOP.replace("hidden_states, residual = layer", "hidden_states, i = layer")),
        "assigns the loop's index",
        id="range-index-reassigned",
    ),
    pytest.param(
        source(tail=NORM_TAIL.replace("return hidden_states", "return hidden_states, residual")),
        "to end with `return <hidden states>`",
        id="returns-a-pair",
    ),
]


@pytest.mark.parametrize(("code", "reason"), REFUSED)
def test_unrecognised_sources_are_refused_with_the_reason(code, reason):
    verdict = DecoderPatch(TOY).examine(code, reader(), Options())
    assert verdict.state is State.UNSUPPORTED and reason in verdict.reason
    assert verdict.patched is None


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
        toy_source("pair-islice").replace(PAIR_CALL, "hidden_states, residual = layer(positions, hidden_states)"),
        toy_source("pair-islice").replace(
            "self.embed_tokens = None", "self.embed_tokens = None\n        ToyDecoderLayer()"
        )
        + EXAONE_LAYER,
    ],
    ids=["not-handed-the-residual", "never-reads-the-residual"],
)
def test_layers_that_add_their_own_residual_hand_on_the_stream_in_hidden_states(code):
    """The stream is what the next layer is given: ``hidden_states`` alone, when the layers are not handed
    the residual (StableLM) or never read it (EXAONE-4's post-norm layers)."""
    patch = DecoderPatch(toy_family())
    verdict = patch.examine(code, reader(), Options())
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
