"""Behaviour of the model families patched by the generic decoder codemod (GLM-4.5 MoE, Gemma 3, Ling,
MiniMax-M2, LongCat-Flash, Qwen3-Next, Qwen3.5), and of families the rule finds with no catalog entry
(Mixtral, Qwen2-MoE, OLMoE, InternLM2).

The same spec as DeepSeek's (``test_eagle3_behaviour``), run on each family's real model
class with stand-in layers: ``__init__`` starts with no ids; ``forward`` captures the input
of layer k for global ids, id 0 without a residual, id n the last layer's pre-norm output,
in layer order; with nothing captured the output is bit for bit the unpatched one; the
causal LM supports EAGLE-3, its setter drives ``forward``, its default is
``(2, n // 2, n - 3)`` (neighbours of the middle below 7 layers), under the name the release's
runner asks (``get_eagle3_default_aux_hidden_state_layers`` from 0.18.0, where the protocol's
own defaults expect ``EagleModelMixin`` and would repeat ids); Gemma 3's multimodal wrapper
delegates; the gate accepts the types.  On an unpatched tree these tests fail.  From 0.18.0
DeepSeek is native: there only this file runs (``test_eagle3_behaviour`` is the patch's spec).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.machinery
import importlib.util
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import pytest
import tool_families
import torch
from assertions import assert_captured, assert_intermediate, assert_same, release_supports_eagle3
from harness import DecoderFile, decoder_stage, reference_forward
from packaging.version import Version
from torch import nn

VERSION = harness.vllm_version()
GETTER = harness.default_ids_getter()
MODELS = "vllm.model_executor.models"


@dataclass(frozen=True)
class StandIns:
    """What the tool's data does not say of a family and its tests need: the classes stood in for here, what
    the model's ``__init__`` reads, and which releases ship and import the family's file."""

    layer: str
    """The decoder layer class (:attr:`harness.DecoderFile.layer`)."""
    first_release: Version
    """The first release shipping the file: before it the family is absent, not a failure."""
    norm: str = "RMSNorm"
    stand_in: type = harness.StandInLayer
    config: tuple[tuple[str, Any], ...] = ()
    layer_parameter: str | None = None
    imports_on_cpu_from: Version | None = None
    """Where later than ``first_release``: the first release whose module imports without Triton."""
    needs_torchvision: bool = False
    """The module imports transformers' Qwen2-VL video processor, which needs torchvision."""

    def decoder_file(self, family: tool_families.ToolFamily) -> DecoderFile:
        return DecoderFile(
            family.module, family.model, self.layer, self.norm, self.stand_in, self.config, self.layer_parameter
        )


@dataclass(frozen=True)
class FamilyUnderTest:
    """A family of the tool's, with the stand-ins this file keeps for it."""

    decoder: DecoderFile
    causal_lm: str
    stand_ins: StandIns


HYBRID_LAYERS = (("layer_types", ["linear_attention", "full_attention"] * 32),)
"""What Qwen3-Next's and Qwen3.5's configs say of each layer (their ``__init__`` picks the layer kind by it)."""

TOOL = tool_families.load()
OWN_SPEC = {"deepseek_v2": "test_eagle3_behaviour.py"}
"""The tool's families whose behaviour another file specifies."""
STAND_INS = {
    "glm4_moe": StandIns("Glm4MoeDecoderLayer", Version("0.10.0")),
    "bailing_moe": StandIns(
        "BailingMoeBlock",
        Version("0.10.0"),
        stand_in=harness.HiddenFirstStandInLayer,
        config=(("tie_word_embeddings", False), ("embedding_dropout", 0.0)),
    ),
    "minimax_m2": StandIns("MiniMaxM2DecoderLayer", Version("0.11.1")),
    "longcat_flash": StandIns(
        "FlashDecoderLayer",
        Version("0.11.0"),
        config=(("ffn_hidden_size", 128),),  # 0.11.x's FlashConfig requires a width
    ),
    "qwen3_next": StandIns(
        "Qwen3NextDecoderLayer",
        Version("0.10.2"),
        norm="Qwen3NextRMSNorm",
        config=HYBRID_LAYERS,
        imports_on_cpu_from=Version("0.11.1"),
    ),
    "qwen3_5": StandIns(  # its model runs Qwen3NextModel.forward, patched in qwen3_next.py
        "Qwen3_5DecoderLayer",
        Version("0.17.0"),
        norm="Qwen3_5RMSNorm",
        config=HYBRID_LAYERS,
        needs_torchvision=True,
    ),
    "gemma3": StandIns("Gemma3DecoderLayer", Version("0.8.5"), norm="GemmaRMSNorm"),
    # Families the tool finds by rule (vllm_eagle3_patch/discovery.py): plain `apply` patches them
    "mixtral": StandIns("MixtralDecoderLayer", Version("0.8.5")),
    "qwen2_moe": StandIns("Qwen2MoeDecoderLayer", Version("0.8.5")),
    "olmoe": StandIns("OlmoeDecoderLayer", Version("0.8.5"), layer_parameter="layer_type"),
    "internlm2": StandIns(  # its embedding is tok_embeddings: the patch answers embed_tokens too
        "InternLMDecoderLayer", Version("0.8.5"), layer_parameter="layer_type"
    ),
}
UNDER_TEST = sorted(set(STAND_INS) | ({family.name for family in TOOL.registered} - set(OWN_SPEC)))
"""Every family of the tool's catalog (one without stand-ins here fails, naming it) and those found by rule
that this file keeps stand-ins for."""


def stand_ins_of(name: str) -> StandIns:
    stand_ins = STAND_INS.get(name)
    assert stand_ins is not None, f"the tool's family {name} has no stand-ins here: add them to STAND_INS"
    return stand_ins


def under_test(name: str) -> FamilyUnderTest:
    """The tool's family of module ``name`` (``gemma3``), as the tool's data describes it, with its stand-ins."""
    stand_ins = stand_ins_of(name)
    family = TOOL.named(name)
    assert family is not None, f"the tool neither registers nor finds by rule the family of vLLM {VERSION}'s {name}"
    return FamilyUnderTest(stand_ins.decoder_file(family), family.causal_lm, stand_ins)


def patched_by_the_tool(spec: importlib.machinery.ModuleSpec) -> bool:
    return harness.MARK in Path(str(spec.origin)).read_text(encoding="utf-8")


def native(spec: importlib.machinery.ModuleSpec, family: FamilyUnderTest) -> bool:
    """Upstream's own EAGLE-3, not this tool's to prove: the causal LM defines a getter or
    lists ``SupportsEagle3``, or the decoder is an ``EagleModelMixin`` (as ``status`` judges).
    Read from the source, as the module may not import here."""
    source = Path(str(spec.origin)).read_text(encoding="utf-8")
    if harness.MARK in source:
        return False
    classes = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}

    def bases(name: str) -> set[str]:
        return {ast.unparse(base) for base in classes[name].bases} if name in classes else set()

    causal_lm = classes.get(family.causal_lm)
    getter = causal_lm is not None and any(
        isinstance(i, ast.FunctionDef) and i.name in harness.GETTERS for i in causal_lm.body
    )
    return getter or "SupportsEagle3" in bases(family.causal_lm) or "EagleModelMixin" in bases(family.decoder.model)


TORCHVISION_MISSING = (
    "{module} imports transformers' Qwen2-VL video processor, which needs torchvision, absent from this "
    "interpreter (PyPI's torchvision does not load beside the local CPU torch): the outer suite runs these "
    "tests in the engine interpreter (PyPI's torch and torchvision), "
    "test_releases.py::test_qwen3_5_on_its_own_interpreter"
)


@pytest.fixture(params=UNDER_TEST)
def family(request: pytest.FixtureRequest) -> FamilyUnderTest:
    return patched_here(request.param)


def patched_here(name: str) -> FamilyUnderTest:
    """The family ``name``, or a skip saying why its patched code cannot run in this release and interpreter."""
    module = f"{MODELS}.{name}"
    spec = importlib.util.find_spec(module)
    if spec is None:
        first_release = stand_ins_of(name).first_release
        assert VERSION < first_release, f"{module} missing from vLLM {VERSION}"
        pytest.skip(f"vLLM {VERSION} has no {module} (first shipped in {first_release})")
    chosen = under_test(name)
    if native(spec, chosen):
        pytest.skip(f"vLLM {VERSION}'s {chosen.causal_lm} implements EAGLE-3 itself (native)")
    if chosen.stand_ins.needs_torchvision and importlib.util.find_spec("torchvision") is None:
        pytest.skip(TORCHVISION_MISSING.format(module=module))
    if chosen.stand_ins.imports_on_cpu_from and VERSION < chosen.stand_ins.imports_on_cpu_from:
        pytest.skip(
            f"vLLM {VERSION}'s {module} cannot be imported without Triton: it loads its FLA kernels "
            "at import, and this release's Triton placeholder lacks triton.language.exp (AttributeError)"
        )
    return chosen


def test_init_sets_empty_aux_layers(family: FamilyUnderTest) -> None:
    with decoder_stage(family.decoder) as stage:
        assert type(stage.model).__name__ == family.decoder.model
        assert "aux_hidden_state_layers" in vars(stage.model), "not set by __init__"
        assert stage.model.aux_hidden_state_layers == () and type(stage.model.aux_hidden_state_layers) is tuple


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param((0,), id="first-layer-input"),
        pytest.param((4,), id="middle"),
        pytest.param((8,), id="final-output"),
        pytest.param((2, 4, 5), id="default-ids"),
        pytest.param((7, 0, 8, 3), id="unordered"),
        pytest.param((1, 9, 100), id="beyond-n-ignored"),
    ],
)
def test_capture_single_stage(family: FamilyUnderTest, ids: tuple[int, ...]) -> None:
    with decoder_stage(family.decoder, 8) as stage:
        ref = reference_forward(stage)
        assert_captured(stage.run(ids), stage, ref, ids)


def test_capture_of_layer_zero_is_the_embedding(family: FamilyUnderTest) -> None:
    with decoder_stage(family.decoder, 8) as stage:
        embeds, residual = stage.inputs()
        assert residual is None
        _, aux = stage.run((0,))
        assert_same(aux[0], embeds, "capture of id 0")


def test_last_stage_uses_global_ids(family: FamilyUnderTest) -> None:
    with decoder_stage(family.decoder, 8, 4, 8, first=False, last=True) as stage:
        ref = reference_forward(stage)
        assert_captured(stage.run((8, 1, 6, 4, 3)), stage, ref, (8, 1, 6, 4, 3))


@pytest.mark.parametrize(
    ("first", "last", "start", "end"),
    [
        pytest.param(True, True, 0, 8, id="single-stage"),
        pytest.param(True, False, 0, 4, id="first-rank"),
        pytest.param(False, True, 4, 8, id="last-rank"),
    ],
)
@pytest.mark.parametrize("ids", [None, ()], ids=["fresh", "empty"])
def test_nothing_captured_is_unchanged(
    family: FamilyUnderTest, first: bool, last: bool, start: int, end: int, ids: tuple[int, ...] | None
) -> None:
    with decoder_stage(family.decoder, 8, start, end, first=first, last=last) as stage:
        ref = reference_forward(stage)
        out = stage.run(ids)
        if last:
            assert ref.output is not None
            assert_same(out, ref.output, "output")
        else:
            assert_intermediate(out, stage, ref)


def test_capturing_on_a_non_last_rank_sends_the_same(family: FamilyUnderTest) -> None:
    """What the next rank needs, unchanged; a decoder that carries aux states across ranks sends its
    captures beside it (ids 0 and 2: the stream entering layer 4 is the next rank's to capture)."""
    with decoder_stage(family.decoder, 8, 0, 4, first=True, last=False) as stage:
        ref = reference_forward(stage)
        out = stage.run((0, 2, 4))
        if not relays(stage.model):
            assert_intermediate(out, stage, ref)
            return
        sent = {key: out.tensors.pop(key) for key in list(out.tensors) if key.startswith(RELAY_KEY)}
        assert_intermediate(out, stage, ref)
        assert sorted(sent) == [f"{RELAY_KEY}0", f"{RELAY_KEY}1"]
        assert_same(sent[f"{RELAY_KEY}0"], ref.layer_inputs[0], "id 0 sent on")
        assert_same(sent[f"{RELAY_KEY}1"], ref.layer_inputs[2], "id 2 sent on")


# --------------------------------------------------------------------------- across pipeline ranks

RELAY_UTILS = "vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils"
RELAY_KEY = "aux_hidden_states_"
OVER_PP = "supports_aux_hidden_states_over_pp"
ACROSS_RANKS = (0, 2, 3, 4, 6, 8)
"""Id 0, id n, and the first layer of each rank in both splits below (the stream entering it is the
previous rank's output: captured once, by the rank that runs that layer)."""


def relays(model: nn.Module) -> bool:
    """Whether this tool made the decoder carry aux states across pipeline ranks."""
    return OVER_PP in vars(type(model)) and patched_by_the_tool(importlib.util.find_spec(type(model).__module__))


def relay_utils() -> types.ModuleType:
    """Model runner V2's EAGLE-3 helpers, where they carry aux states across ranks (0.30.0 on)."""
    try:
        spec = importlib.util.find_spec(RELAY_UTILS)
    except ModuleNotFoundError:  # no vllm.v1.worker.gpu package at all (before model runner V2)
        spec = None
    if spec is None or "def aux_hidden_state_relay_keys" not in Path(str(spec.origin)).read_text(encoding="utf-8"):
        pytest.skip(
            f"vLLM {VERSION}'s runners carry no aux states across pipeline ranks (model runner V2 does from "
            "0.30.0); the setter refuses ids on earlier ranks (test_eagle3_behaviour's pipeline tests)"
        )
    return importlib.import_module(RELAY_UTILS)


@contextlib.contextmanager
def parallel_state_initialized() -> Iterator[None]:
    """``model_parallel_is_initialized()`` true, as on a real rank (the setter and the runner's helpers ask)."""
    parallel_state = importlib.import_module("vllm.distributed.parallel_state")
    saved = parallel_state.model_parallel_is_initialized
    parallel_state.model_parallel_is_initialized = lambda: True
    try:
        yield
    finally:
        parallel_state.model_parallel_is_initialized = saved


def relayed(utils: types.ModuleType, lm: nn.Module, received: object, sent: object) -> object:
    """What model runner V2 sends from a middle rank: its output plus the earlier ranks' aux slots,
    by the release's own ``PPHandler.relay_aux_hidden_states``."""
    handler = importlib.import_module("vllm.v1.worker.gpu.pp_utils").PPHandler
    keys = types.SimpleNamespace(aux_hidden_state_relay_keys=utils.aux_hidden_state_relay_keys(lm))
    return handler.relay_aux_hidden_states(keys, received, sent)


@pytest.mark.parametrize(
    "split", [pytest.param(((0, 4), (4, 8)), id="two-ranks"), pytest.param(((0, 3), (3, 6), (6, 8)), id="three-ranks")]
)
def test_aux_states_cross_pipeline_ranks(family: FamilyUnderTest, split: tuple[tuple[int, int], ...]) -> None:
    """Each rank built and run on its own, joined as model runner V2 joins them (the release's setter call,
    slot reservation, PP check and relay): the last rank hands the drafter what one rank would, in layer
    order, and each later rank receives exactly the slots the runner reserved.  A decoder this tool could
    not make carry them refuses ids on earlier ranks instead, naming why."""
    utils = relay_utils()
    with decoder_stage(family.decoder, 8) as whole:
        expected = reference_forward(whole)
    sent = None
    for rank, (start, end) in enumerate(split):
        first, last = rank == 0, rank == len(split) - 1
        stage_of_rank = decoder_stage(family.decoder, 8, start, end, first=first, last=last)
        with stage_of_rank as stage, parallel_state_initialized():
            lm = harness.causal_lm_shell(family.causal_lm, stage.model, family.decoder.module)
            lm.make_empty_intermediate_tensors = stage.model.make_empty_intermediate_tensors
            if not relays(stage.model):
                if not first:
                    with pytest.raises(ValueError, match=r"lies on pipeline rank 0, .*--pipeline-parallel-size 1"):
                        lm.set_aux_hidden_state_layers(ACROSS_RANKS)
                    return
                continue
            lm.set_aux_hidden_state_layers(ACROSS_RANKS)  # what set_eagle3_aux_hidden_state_layers does
            utils.reserve_aux_intermediate_tensor_slots(lm)
            utils.verify_supports_aux_hidden_states_over_pp(lm, "eagle3")
            if sent is not None:
                reserved = lm.make_empty_intermediate_tensors(harness.NUM_TOKENS, torch.float32, "cpu")
                assert {k: v.shape for k, v in reserved.items()} == {k: v.shape for k, v in sent.items()}
            out = stage.run(received=sent)
            sent = out if last else relayed(utils, lm, sent, out)
    assert_captured(sent, whole, expected, ACROSS_RANKS)


def test_a_runner_that_relays_nothing_is_named() -> None:
    """Model runner V1 sets the ids on the last rank only and relays nothing: the first forward says so."""
    relay_utils()
    qwen2_moe = patched_here("qwen2_moe")
    with decoder_stage(qwen2_moe.decoder, 8, 4, 8, first=False, last=True) as stage, parallel_state_initialized():
        if not relays(stage.model):
            pytest.skip(f"vLLM {VERSION}'s Qwen2MoeModel does not carry aux states across ranks")
        lm = harness.causal_lm_shell(qwen2_moe.causal_lm, stage.model, qwen2_moe.decoder.module)
        lm.set_aux_hidden_state_layers(ACROSS_RANKS)
        with pytest.raises(RuntimeError, match=r"3 EAGLE-3 aux layer ids lie before layer 4.*model runner V2"):
            stage.run()


def test_supports_eagle3(family: FamilyUnderTest) -> None:
    supports_eagle3 = release_supports_eagle3()
    with decoder_stage(family.decoder) as stage:
        lm = harness.causal_lm_shell(family.causal_lm, stage.model, family.decoder.module)
        assert supports_eagle3(type(lm)) and supports_eagle3(lm)


@pytest.mark.parametrize(
    ("num_layers", "expected"),
    [pytest.param(4, (1, 2, 3), id="4"), pytest.param(8, (2, 4, 5), id="8"), pytest.param(62, (2, 31, 59), id="62")],
)
def test_methods(family: FamilyUnderTest, num_layers: int, expected: tuple[int, ...]) -> None:
    """The default ids the runner asks for, and the setter driving the next forward."""
    with decoder_stage(family.decoder, num_layers) as stage:
        lm = harness.causal_lm_shell(family.causal_lm, stage.model, family.decoder.module)
        assert tuple(getattr(lm, GETTER)()) == expected
        lm.set_aux_hidden_state_layers((0, 3, num_layers))
        assert stage.model.aux_hidden_state_layers == (0, 3, num_layers)
        ref = reference_forward(stage)
        assert_captured(stage.run(), stage, ref, (0, 3, num_layers))


def test_gemma3_multimodal_wrapper_delegates() -> None:
    """``get_model()`` is ``Gemma3ForConditionalGeneration`` for a multimodal Gemma 3 checkpoint."""
    gemma3 = under_test("gemma3")
    wrapper_module = importlib.import_module(f"{MODELS}.gemma3_mm")
    with decoder_stage(gemma3.decoder, 6) as stage:
        wrapper = object.__new__(wrapper_module.Gemma3ForConditionalGeneration)
        nn.Module.__init__(wrapper)
        wrapper.language_model = harness.causal_lm_shell(gemma3.causal_lm, stage.model, gemma3.decoder.module)
        if VERSION >= Version("0.10.1"):
            supports_eagle3 = release_supports_eagle3()
            assert supports_eagle3(type(wrapper)) and supports_eagle3(wrapper)
        assert tuple(getattr(wrapper, GETTER)()) == (2, 3, 4)  # upstream's (2, n // 2, n - 3) repeats 3
        wrapper.set_aux_hidden_state_layers((1, 6))
        assert stage.model.aux_hidden_state_layers == (1, 6)
        ref = reference_forward(stage)
        assert_captured(stage.run(), stage, ref, (1, 6))


def test_qwen3_5_multimodal_class_reaches_the_patched_forward() -> None:
    """``Qwen3_5ForConditionalGeneration`` (what Qwen3.5 checkpoints load as) inherits Qwen3-VL's
    EAGLE-3 methods, which set the ids on ``language_model.model``: a ``Qwen3_5Model`` running
    the forward patched in ``qwen3_next.py``.  Upstream's default ids, not this tool's."""
    qwen3_5 = patched_here("qwen3_5")
    module = importlib.import_module(qwen3_5.decoder.module)
    with decoder_stage(qwen3_5.decoder, 8) as stage:
        wrapper = object.__new__(module.Qwen3_5ForConditionalGeneration)
        nn.Module.__init__(wrapper)
        wrapper.language_model = harness.causal_lm_shell("Qwen3_5ForCausalLM", stage.model, qwen3_5.decoder.module)
        supports_eagle3 = release_supports_eagle3()
        assert supports_eagle3(type(wrapper)) and supports_eagle3(wrapper)
        wrapper.set_aux_hidden_state_layers((0, 4, 8))
        assert stage.model.aux_hidden_state_layers == (0, 4, 8)
        ref = reference_forward(stage)
        assert_captured(stage.run(), stage, ref, (0, 4, 8))


@pytest.mark.parametrize("model_type", TOOL.gated_model_types)
def test_gate_accepts_the_families(model_type: str) -> None:
    """Every release accepts every type the tool's gate admits for its catalog's families: DeepSeek's too,
    where its own spec (``test_eagle3_behaviour``) no longer runs (GLM-5's ``glm_moe_dsa``, which 0.18-0.21's
    whitelist leaves out), and Qwen3-Next's and Qwen3.5's, which the release's own whitelist accepts as "qwen"."""
    harness.run_speculative_gate(model_type)


def test_a_subclass_that_skips_init_runs_the_patched_forward_unchanged() -> None:
    """0.17.x's ``Qwen3_5Model`` inherits ``Qwen3NextModel.forward`` but skips its ``__init__``
    (``super(Qwen3NextModel, self).__init__()``): it must find the ids the patch declares on
    the class and decode exactly as before, even where ``qwen3_5.py`` itself is left alone.
    Stood in for by a subclass of the same shape, so that it runs without torchvision."""
    spec = importlib.util.find_spec(f"{MODELS}.qwen3_next")
    imports_on_cpu_from = stand_ins_of("qwen3_next").imports_on_cpu_from
    if spec is None or VERSION < imports_on_cpu_from or not patched_by_the_tool(spec):
        pytest.skip(f"vLLM {VERSION}: no {MODELS}.qwen3_next patched by this tool and importable here")
    qwen3_next = under_test("qwen3_next")
    model = getattr(importlib.import_module(qwen3_next.decoder.module), qwen3_next.decoder.model)

    class SkipsInit(model):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: object) -> None:
            built = model(**kwargs)
            nn.Module.__init__(self)
            self.__dict__.update((k, v) for k, v in vars(built).items() if k != "aux_hidden_state_layers")

    with decoder_stage(qwen3_next.decoder, 8, model_class=SkipsInit) as stage:
        assert "aux_hidden_state_layers" not in vars(stage.model)
        ref = reference_forward(stage)
        assert ref.output is not None
        assert_same(stage.run(None), ref.output, "output")
