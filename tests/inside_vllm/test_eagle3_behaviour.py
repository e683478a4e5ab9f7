"""Behaviour of a vLLM tree patched for EAGLE-3 on DeepSeek-V2/V3 (and Kimi-K2/K2.5).

Everything here imports and runs the release's real code (see ``harness``); the expected
values come from the stand-in formulas, never from calling the code under test twice.
On an unpatched tree these tests fail: that is how the outer suite knows they bite.

Spec (what the patch must do, matching upstream 0.18.0 and closing its two known gaps):

a. ``DeepseekV2Model.__init__`` sets ``self.aux_hidden_state_layers = tuple[int, ...]()``.
b. ``forward`` captures, for each global id k in ``aux_hidden_state_layers``:
   ``start_layer <= k < end_layer`` -> the input of layer k (``hidden_states + residual``,
   or ``hidden_states`` where ``residual`` is None); ``k == end_layer`` on the last rank ->
   the last layer's output, pre-norm.  The last rank returns ``(normed, [captured...])`` in
   layer order; with nothing captured it returns what the unpatched code returned.
   Non-last ranks still return ``IntermediateTensors``.
c. ``DeepseekV2ForCausalLM`` (so every subclass) supports EAGLE-3 and delegates
   ``set_aux_hidden_state_layers`` / ``get_eagle3_aux_hidden_state_layers`` to
   ``self.model`` (the default being ``(2, n // 2, n - 3)``, and for models of 2 to 6
   layers, where that repeats ids, ``(n // 2 - 1, n // 2, n // 2 + 1)``; fewer than 2
   layers are refused); so does the Kimi-K2.5 wrapper, to its language model.  On the
   last pipeline rank (the only one the runner calls the setter on) an id before the
   rank's first layer is refused, naming the id and the rank that holds it.
d. The speculative-config gate (``SpeculativeConfig._verify_args``) accepts DeepSeek and
   Kimi-K2 targets for ``method="eagle3"``, still accepts what it accepted before and
   still rejects other model types.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
from collections.abc import Iterator

import harness
import pytest
import tool_families
from assertions import assert_captured, assert_intermediate, assert_same, release_supports_eagle3
from harness import Stage, deepseek_stage, reference_forward

VERSION = harness.vllm_version()
TOOL = tool_families.load()
DEEPSEEK = TOOL.named("deepseek_v2")


def _causal_lm_classes() -> tuple[str, ...]:
    """The tool's DeepSeek causal LM and every subclass of it the release's module defines (V3, and in later
    releases more): the runner may hold any of them, and each inherits the patched methods."""
    module = harness.deepseek_module()
    base = getattr(module, DEEPSEEK.causal_lm)
    return tuple(
        name
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, base) and value.__module__ == module.__name__
    )


CAUSAL_LM_CLASSES = _causal_lm_classes()


# --------------------------------------------------------------------------- a. __init__


def test_init_sets_empty_aux_layers() -> None:
    """The real ``__init__`` (through the torch-compile wrapper) starts with no capture."""
    with deepseek_stage() as stage:
        assert "aux_hidden_state_layers" in vars(stage.model), "not set by __init__"
        layers = stage.model.aux_hidden_state_layers
        assert type(layers) is tuple and layers == ()


def test_harness_builds_the_real_model() -> None:
    """Guards the harness itself: real class, real ``__init__`` results, stand-in layers."""
    module = harness.deepseek_module()
    with deepseek_stage(8, 4, 8, first=False, last=True) as stage:
        assert type(stage.model) is module.DeepseekV2Model
        assert (stage.model.start_layer, stage.model.end_layer) == (4, 8)
        assert len(stage.model.layers) == 8
        assert sorted(stage.layers) == [4, 5, 6, 7]
        assert all(isinstance(stage.model.layers[i], module.PPMissingLayer) for i in range(4))
        assert isinstance(stage.model.embed_tokens, module.PPMissingLayer)
        assert isinstance(stage.model.norm, harness.StandInNorm)
    # ``Stage.run`` passes these positionally; every release 0.8.5-0.17.1 has this order.  Kept by hand on
    # purpose: it is the harness's own assumption, checked against the release, not a fact the tests derive.
    parameters = list(inspect.signature(module.DeepseekV2Model.forward).parameters)
    assert parameters == [
        "self", "input_ids", "positions", "intermediate_tensors", "inputs_embeds",
    ]  # fmt: skip


# --------------------------------------------------------------------------- b. forward

SINGLE_STAGE_IDS = [
    pytest.param((0,), id="first-layer-input"),
    pytest.param((4,), id="middle"),
    pytest.param((8,), id="final-output"),
    pytest.param((2, 4, 5), id="default-ids"),
    pytest.param((7, 0, 8, 3), id="unordered"),
    pytest.param((3, 3), id="duplicate-id-once"),
    pytest.param((1, 9, 100), id="beyond-n-ignored"),
]


@pytest.mark.parametrize("ids", SINGLE_STAGE_IDS)
def test_capture_single_stage(ids: tuple[int, ...]) -> None:
    """One stage holding all 8 layers: ids 0..8 capture, in layer order."""
    with deepseek_stage(8) as stage:
        ref = reference_forward(stage)
        out = stage.run(ids)
        assert_captured(out, stage, ref, ids)


def test_capture_of_layer_zero_is_the_embedding() -> None:
    """On the first rank ``residual`` is None before layer 0: id 0 captures the input
    embeddings themselves (upstream 0.18.0 crashes on ``hidden_states + None`` here)."""
    with deepseek_stage(8) as stage:
        embeds, residual = stage.inputs()
        assert residual is None
        _, aux = stage.run((0,))
        assert_same(aux[0], embeds, "capture of id 0")


def test_captures_match_what_layers_saw() -> None:
    """Cross-check against the stand-ins' own records: the capture for id k is the
    ``hidden_states + residual`` layer k was called with, and capturing perturbs nothing."""
    with deepseek_stage(8) as stage:
        ids = (1, 3, 6)
        _, aux = stage.run(ids)
        for got, k in zip(aux, ids):
            (call,) = stage.layers[k].calls
            assert call.residual is not None
            assert_same(got, call.hidden_states + call.residual, f"capture of id {k}")


@pytest.mark.parametrize(
    ("first", "last", "start", "end"),
    [
        pytest.param(True, True, 0, 8, id="single-stage"),
        pytest.param(True, False, 0, 4, id="first-rank"),
        pytest.param(False, False, 3, 6, id="middle-rank"),
        pytest.param(False, True, 4, 8, id="last-rank"),
    ],
)
@pytest.mark.parametrize("ids", [None, ()], ids=["fresh", "empty"])
def test_nothing_captured_is_unchanged(
    first: bool, last: bool, start: int, end: int, ids: tuple[int, ...] | None
) -> None:
    """With no ids, every pipeline position returns exactly the unpatched result."""
    with deepseek_stage(8, start, end, first=first, last=last) as stage:
        ref = reference_forward(stage)
        out = stage.run(ids)
        if last:
            assert ref.output is not None
            assert_same(out, ref.output, "output")
            assert stage.model.norm.calls == 1
        else:
            assert_intermediate(out, stage, ref)


def test_ids_outside_the_stage_only_returns_plain_tensor() -> None:
    """Ids that all fall on other stages capture nothing: the plain tensor comes back."""
    with deepseek_stage(8, 4, 8, first=False, last=True) as stage:
        ref = reference_forward(stage)
        out = stage.run((0, 2, 3, 9))
        assert ref.output is not None
        assert_same(out, ref.output, "output")


def test_last_stage_starting_after_layer_zero() -> None:
    """Layers 4..8 of 8 on the last rank: ids are global, 5 is the input of global
    layer 5, 8 the final pre-norm output; ids on the earlier stage are ignored."""
    with deepseek_stage(8, 4, 8, first=False, last=True) as stage:
        ref = reference_forward(stage)
        out = stage.run((5, 8))
        assert_captured(out, stage, ref, (5, 8))
        _, aux = out
        (call,) = stage.layers[5].calls
        assert call.residual is not None
        assert_same(aux[0], call.hidden_states + call.residual, "input of global layer 5")
        assert_same(aux[1], ref.hidden_states + ref.residual, "final output")


def test_last_stage_mixed_ids() -> None:
    """Unordered ids straddling the stage boundary keep the in-stage ones, in order."""
    with deepseek_stage(8, 4, 8, first=False, last=True) as stage:
        ref = reference_forward(stage)
        ids = (8, 1, 6, 4, 3)
        assert_captured(stage.run(ids), stage, ref, ids)


def test_first_layer_of_a_later_stage() -> None:
    """Id == start_layer on a non-first rank sums the received hidden states and residual."""
    with deepseek_stage(8, 4, 8, first=False, last=True) as stage:
        hidden, residual = stage.inputs()
        assert residual is not None
        _, aux = stage.run((4,))
        assert_same(aux[0], hidden + residual, "input of global layer 4")


@pytest.mark.parametrize(
    ("first", "start", "end", "ids"),
    [
        pytest.param(False, 3, 6, (3, 4, 6), id="middle-rank"),
        pytest.param(True, 0, 4, (0, 2, 4), id="first-rank"),
    ],
)
def test_non_last_rank_returns_intermediate_tensors(first: bool, start: int, end: int, ids: tuple[int, ...]) -> None:
    """Capturing on a non-last rank does not change what it sends on."""
    with deepseek_stage(8, start, end, first=first, last=False) as stage:
        ref = reference_forward(stage)
        out = stage.run(ids)
        assert_intermediate(out, stage, ref)
        assert isinstance(stage.model.norm, harness.deepseek_module().PPMissingLayer)


def test_layers_called_with_release_signature() -> None:
    """Each in-stage layer runs once, with the arguments the release's own decoder layer takes after
    ``residual`` (``llama_4_scaling`` from 0.12.0 on, None here), read from its signature."""
    layer = harness.deepseek_module().DeepseekV2DecoderLayer
    after_residual = list(inspect.signature(layer.forward).parameters)[4:]
    with deepseek_stage(8) as stage:
        stage.run((2, 4, 5))
        expected_extra = (None,) * len(after_residual)
        for index, layer in stage.layers.items():
            assert len(layer.calls) == 1, f"layer {index} ran {len(layer.calls)} times"
            assert layer.calls[0].extra_args == expected_extra


# --------------------------------------------------------------------------- c. CausalLM


@pytest.mark.parametrize("class_name", CAUSAL_LM_CLASSES)
def test_supports_eagle3(class_name: str) -> None:
    """The class and an instance pass ``supports_eagle3`` (the runner's check)."""
    supports_eagle3 = release_supports_eagle3()
    cls = getattr(harness.deepseek_module(), class_name)
    assert supports_eagle3(cls)
    with deepseek_stage() as stage:
        assert supports_eagle3(harness.causal_lm_shell(class_name, stage.model))


@pytest.mark.parametrize("class_name", CAUSAL_LM_CLASSES)
def test_set_aux_hidden_state_layers_drives_forward(class_name: str) -> None:
    """``set_aux_hidden_state_layers`` writes ``model.aux_hidden_state_layers`` and the
    next forward captures those layers."""
    with deepseek_stage(8) as stage:
        lm = harness.causal_lm_shell(class_name, stage.model)
        lm.set_aux_hidden_state_layers((2, 4, 5))
        assert stage.model.aux_hidden_state_layers == (2, 4, 5)
        ref = reference_forward(stage)
        assert_captured(stage.run(), stage, ref, (2, 4, 5))


@pytest.mark.parametrize("class_name", CAUSAL_LM_CLASSES)
@pytest.mark.parametrize(
    ("num_layers", "start", "end", "first", "last", "expected"),
    [
        pytest.param(8, 0, 8, True, True, (2, 4, 5), id="8-layers"),
        pytest.param(61, 0, 61, True, True, (2, 30, 58), id="61-layers-like-v3"),
        pytest.param(8, 4, 8, False, True, (2, 4, 5), id="8-layers-last-stage"),
        pytest.param(7, 0, 7, True, True, (2, 3, 4), id="7-layers-smallest-upstream"),
        pytest.param(6, 0, 6, True, True, (2, 3, 4), id="6-layers-small"),
        pytest.param(5, 0, 5, True, True, (1, 2, 3), id="5-layers-small"),
        pytest.param(4, 0, 4, True, True, (1, 2, 3), id="4-layers-small"),
        pytest.param(3, 0, 3, True, True, (0, 1, 2), id="3-layers-small"),
        pytest.param(2, 0, 2, True, True, (0, 1, 2), id="2-layers-small"),
    ],
)
def test_default_aux_layers(
    class_name: str,
    num_layers: int,
    start: int,
    end: int,
    first: bool,
    last: bool,
    expected: tuple[int, ...],
) -> None:
    """``(2, n // 2, n - 3)`` with ``n = len(model.layers)``, all layers not the stage's."""
    with deepseek_stage(num_layers, start, end, first=first, last=last) as stage:
        lm = harness.causal_lm_shell(class_name, stage.model)
        got = lm.get_eagle3_aux_hidden_state_layers()
        assert tuple(got) == expected
        assert all(type(k) is int for k in got)


@pytest.mark.parametrize("class_name", CAUSAL_LM_CLASSES)
def test_default_aux_layers_capture_three_distinct_states_on_a_tiny_model(class_name: str) -> None:
    """4 layers: upstream's ``(2, 2, 1)`` would hand the drafter two states; three come back."""
    with deepseek_stage(4) as stage:
        lm = harness.causal_lm_shell(class_name, stage.model)
        ids = lm.get_eagle3_aux_hidden_state_layers()
        lm.set_aux_hidden_state_layers(ids)
        _, aux = stage.run()
        assert len(aux) == 3


@pytest.mark.parametrize("class_name", CAUSAL_LM_CLASSES)
def test_default_aux_layers_refuse_a_one_layer_model(class_name: str) -> None:
    with deepseek_stage(1) as stage:
        lm = harness.causal_lm_shell(class_name, stage.model)
        with pytest.raises(ValueError, match=r"needs 3 distinct aux hidden states; a model with 1 decoder layers"):
            lm.get_eagle3_aux_hidden_state_layers()


@contextlib.contextmanager
def real_pipeline(world_size: int) -> Iterator[None]:
    """Inside a ``deepseek_stage`` block: the release's own ``get_pp_indices`` and a last
    rank of ``world_size``, as the setter sees them on a real last rank."""
    utils = importlib.import_module("vllm.distributed.utils")
    parallel_state = importlib.import_module("vllm.distributed.parallel_state")
    saved = utils.get_pp_indices, parallel_state.get_pp_group
    group = harness.FakePPGroup(rank_in_group=world_size - 1, world_size=world_size)
    utils.get_pp_indices, parallel_state.get_pp_group = REAL_PP_INDICES, lambda: group
    try:
        yield
    finally:
        utils.get_pp_indices, parallel_state.get_pp_group = saved


REAL_PP_INDICES = importlib.import_module("vllm.distributed.utils").get_pp_indices


@pytest.mark.parametrize("class_name", CAUSAL_LM_CLASSES)
@pytest.mark.parametrize(
    ("num_layers", "world_size", "ids", "message"),
    [
        pytest.param(8, 2, (2, 4, 5), r"id 2 lies on pipeline rank 0, .* holds layers 4\.\.7", id="two-ranks"),
        pytest.param(12, 3, (9, 5, 10), r"id 5 lies on pipeline rank 1, .* holds layers 8\.\.11", id="three-ranks"),
    ],
)
def test_setter_refuses_ids_of_earlier_pipeline_ranks(
    class_name: str, num_layers: int, world_size: int, ids: tuple[int, ...], message: str
) -> None:
    """Up to 0.17.x only the last rank's layers reach the drafter: refused at load, with the
    id, the rank holding it and what to do; ids on the last rank are kept and captured."""
    start = REAL_PP_INDICES(num_layers, world_size - 1, world_size)[0]
    with deepseek_stage(num_layers, start, num_layers, first=False, last=True) as stage, real_pipeline(world_size):
        lm = harness.causal_lm_shell(class_name, stage.model)
        with pytest.raises(ValueError, match=message + r".*--pipeline-parallel-size 1.*ids >= " + str(start)):
            lm.set_aux_hidden_state_layers(ids)
        assert stage.model.aux_hidden_state_layers == ()
        on_last_rank = (start, start + 1, num_layers)
        lm.set_aux_hidden_state_layers(on_last_rank)
        assert_captured(stage.run(), stage, reference_forward(stage), on_last_rank)


def test_kimi_k25_setter_refuses_ids_of_earlier_pipeline_ranks() -> None:
    with deepseek_stage(8, 4, 8, first=False, last=True) as stage, real_pipeline(2):
        wrapper = _kimi_k25_shell(stage)
        with pytest.raises(ValueError, match=r"id 3 lies on pipeline rank 0"):
            wrapper.set_aux_hidden_state_layers((3, 5))


KIMI_K25 = "vllm.model_executor.models.kimi_k25"


def _kimi_k25_language_model(kimi: object) -> str | None:
    """The causal LM the release's Kimi-K2.5 builds as its language model, read from its source: the class its
    ``init_vllm_registered_model(..., architectures=[...])`` names (0.16.0+), or None where it builds the bare
    ``DeepseekV2Model`` itself (0.15.x)."""
    for node in ast.walk(ast.parse(inspect.getsource(kimi))):
        if isinstance(node, ast.keyword) and node.arg == "architectures" and isinstance(node.value, ast.List):
            (name,) = node.value.elts
            assert isinstance(name, ast.Constant), ast.dump(name)
            return name.value
    return None


def _kimi_k25_shell(stage: Stage) -> object:
    """A ``KimiK25ForConditionalGeneration`` holding ``stage.model`` as it would: in the causal LM its
    source names (whose ``.model`` is the ``DeepseekV2Model``), or directly."""
    if importlib.util.find_spec(KIMI_K25) is None:
        pytest.skip(f"vLLM {VERSION} has no kimi_k25.py (first shipped in 0.15.0)")
    from torch import nn

    kimi = importlib.import_module(KIMI_K25)
    wrapper = object.__new__(kimi.KimiK25ForConditionalGeneration)
    nn.Module.__init__(wrapper)
    language_model = _kimi_k25_language_model(kimi)
    wrapper.language_model = (
        stage.model if language_model is None else harness.causal_lm_shell(language_model, stage.model)
    )
    return wrapper


def test_kimi_k25_delegates_to_language_model() -> None:
    """The runner calls ``get_model()``, the multimodal wrapper: it must support EAGLE-3
    and reach the DeepSeek model underneath."""
    with deepseek_stage(8) as stage:
        wrapper = _kimi_k25_shell(stage)
        supports_eagle3 = release_supports_eagle3()
        assert supports_eagle3(type(wrapper)) and supports_eagle3(wrapper)
        assert tuple(wrapper.get_eagle3_aux_hidden_state_layers()) == (2, 4, 5)
        wrapper.set_aux_hidden_state_layers((1, 8))
        assert stage.model.aux_hidden_state_layers == (1, 8)
        ref = reference_forward(stage)
        assert_captured(stage.run(), stage, ref, (1, 8))


# --------------------------------------------------------------------------- d. the gate

NEWLY_ACCEPTED = DEEPSEEK.model_types
"""The model types of the tool's DeepSeek family (its catalog's: V2, V3, V3.2, Kimi-K2, GLM-5)."""
ACCEPTED_BEFORE = TOOL.accepted_before
"""What this release's gate accepted unpatched: the entries of its whitelist (or ``"llama"``), read from the wheel by
the outer suite.  The gate matches them as substrings of the model type, so each is tried as it stands and inside a
longer type (``llama`` and ``llama_text``): a patch that matched whole types only would be caught."""
STILL_REJECTED = ("ouro", "plamo2", "plamo3")
"""Kept by hand on purpose, an independent witness: real model types of architectures the rule refuses (their
loops are not followed), which neither the release's gate nor the tool's widened one may admit.  Read from the
tool, a tool that admitted everything would leave nothing to reject."""


def test_the_release_gate_was_read() -> None:
    """An independent witness that :data:`ACCEPTED_BEFORE` was read at all: every release with EAGLE-3 accepts
    Llama, its first target (an empty reading would leave the next test nothing to check)."""
    assert "llama" in ACCEPTED_BEFORE, ACCEPTED_BEFORE


@pytest.mark.parametrize("model_type", NEWLY_ACCEPTED)
def test_gate_accepts_deepseek_and_kimi(model_type: str) -> None:
    """DeepSeek-V2/V3/V3.2 and Kimi-K2 targets pass the release's real check.

    Every release 0.8.5-0.17.1 has the gate in ``SpeculativeConfig._verify_args``
    (0.17.x renamed its list ``aux_hidden_states_supported``), so this runs everywhere.
    """
    harness.run_speculative_gate(model_type)


@pytest.mark.parametrize("model_type", [t for entry in ACCEPTED_BEFORE for t in (entry, f"{entry}_text")])
def test_gate_still_accepts_previous_targets(model_type: str) -> None:
    """The patch widens the list; it does not replace it."""
    harness.run_speculative_gate(model_type)


@pytest.mark.parametrize("model_type", STILL_REJECTED)
def test_gate_still_rejects_other_targets(model_type: str) -> None:
    """The gate itself stays: an unsupported target type is still refused by it."""
    with pytest.raises(ValueError, match=r"(?i)only supported for"):
        harness.run_speculative_gate(model_type)
