"""Edge cases of the generic decoder-only EAGLE-3 codemod on small synthetic sources (no vLLM code here)."""

from __future__ import annotations

import types

import libcst as cst
import pytest
from helpers.as_codemod import as_codemod
from helpers.decoder_sources import (
    CHILD,
    CHILD_SOURCE,
    ISLICE_LOOP,
    MIXIN_RUNNER,
    NORM_TAIL,
    RUNNER_WITH_EAGLE3,
    TOY,
    WRAPPER_SOURCE,
    patch,
    reader,
    runner,
    source,
)
from helpers.toy_decoders import IMPORT, LOOPS, Eagle3, load, toy_family, toy_source
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.codemod.family import Family, FoundWrapper, Wrapper
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.eagle3.release import DEFAULT_GETTER, GETTER
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3, DecoderPatch
from vllm_eagle3_patch.patches.eagle3_methods import eagle3_methods
from vllm_eagle3_patch.patches.wrapper_eagle3 import FoundWrappersPatch

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


def methods_as_added(decoder: str = "self.model") -> str:
    """The shared ``SupportsEagle3`` methods (their text is the DeepSeek tests' subject) as the
    codemod appends them to a class: indented, a blank line before each, the ``def`` marked."""
    lines = []
    for line in eagle3_methods(decoder, None).splitlines():
        if line.startswith("def "):
            lines += ["", f"    {line}  # vllm-eagle3-patch"]
        else:
            lines.append(f"    {line}")
    return "\n".join(lines) + "\n"


METHODS = methods_as_added()


class TestDecoderEagle3(CodemodTest):
    TRANSFORM = as_codemod(DecoderEagle3)

    def test_islice_loop_is_enumerated_with_global_ids(self) -> None:
        after = (
            """\
from .interfaces import SupportsPP, SupportsEagle3  # vllm-eagle3-patch


class ToyModel(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.embed_tokens = make_embedding(config)
        self.layers = make_layers(config)
        self.aux_hidden_state_layers = tuple[int, ...]()  # vllm-eagle3-patch

    def forward(self, positions, intermediate_tensors):
        hidden_states, residual = intermediate_tensors
        aux_hidden_states = []  # vllm-eagle3-patch
        aux_layer_ids = self.aux_hidden_state_layers  # vllm-eagle3-patch
        for aux_layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), start=self.start_layer):  # vllm-eagle3-patch
            if aux_layer_idx in aux_layer_ids:  # vllm-eagle3-patch
                aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)
            hidden_states, residual = layer(positions, hidden_states, residual)

        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)

        if self.end_layer in aux_layer_ids:  # vllm-eagle3-patch
            aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        if aux_hidden_states:  # vllm-eagle3-patch
            return hidden_states, aux_hidden_states
        return hidden_states


class ToyForCausalLM(nn.Module, SupportsPP, SupportsEagle3):  # vllm-eagle3-patch

    def forward(self, x):
        return self.model(x)
"""
            + METHODS
        )
        self.assertCodemod(source(), after, TOY)

    def test_without_protocol_only_methods_are_added(self) -> None:
        after = patch(source(), protocol=False)
        assert "SupportsEagle3" not in after
        assert "def set_aux_hidden_state_layers" in after and "def get_eagle3_aux_hidden_state_layers" in after

    def test_fixed_aux_layers(self) -> None:
        after = patch(source(), aux_layers=(1, 5, 9))
        assert "layers = (1, 5, 9)  # vllm-eagle3-patch apply --aux-layers" in after
        assert "must lie in 0..{num_layers}" in after


@pytest.mark.parametrize(
    "imports",
    [
        "from .interfaces import SupportsPP",
        "from .interfaces import (SupportsLoRA,\n                         SupportsPP)",
        "from .interfaces import (\n    SupportsLoRA,\n    SupportsPP,\n)",
    ],
)
def test_protocol_joins_the_existing_interfaces_import_of_any_shape(imports):
    out = patch(source(imports=imports))
    header = out.split("class ToyModel")[0]
    assert header.count("from .interfaces import") == 1
    assert "SupportsEagle3" in header and "SupportsPP" in header
    compile(out, "patched", "exec")


@pytest.mark.parametrize(
    ("bases", "expected"),
    [
        ("nn.Module, SupportsPP", "class ToyForCausalLM(nn.Module, SupportsPP, SupportsEagle3):"),
        (
            "\n    nn.Module, SupportsPP, SupportsLoRA\n",
            "class ToyForCausalLM(\n    nn.Module, SupportsPP, SupportsLoRA, SupportsEagle3\n):",
        ),
        (
            "\n    nn.Module,\n    SupportsPP,\n",
            "class ToyForCausalLM(\n    nn.Module,\n    SupportsPP,\n    SupportsEagle3,\n):",
        ),
    ],
)
def test_protocol_base_keeps_the_layout_of_the_bases(bases, expected):
    assert expected in patch(source(bases=bases))


def test_crlf_sources_stay_crlf():
    out = patch(source().replace("\n", "\r\n"))
    assert "\n" not in out.replace("\r\n", "")


def test_comments_above_the_loop_stay_above_the_new_lines():
    loop = "        # run the decoder layers\n" + ISLICE_LOOP
    out = patch(source(loop=loop))
    assert "        # run the decoder layers\n        aux_hidden_states = []" in out


REFUSED = [
    pytest.param(
        source(loop=ISLICE_LOOP.replace("hidden_states, residual = layer", "aux_hidden_states, residual = layer")),
        "already uses the name 'aux_hidden_states'",
        id="name-taken",
    ),
    pytest.param(
        source().replace("class ToyForCausalLM", "class OtherForCausalLM"), "ToyForCausalLM", id="no-causal-lm"
    ),
    pytest.param(source().replace("class ToyModel", "class ToyNet"), "class ToyModel", id="no-model"),
    pytest.param(source() + "\n\nclass ToyModel:\n    pass\n", "found 2", id="two-models"),
    pytest.param(
        source().replace("residual = intermediate_tensors", "residual = aux_layer_idx = intermediate_tensors"),
        "aux_layer_idx",
        id="index-name-taken",
    ),
    pytest.param(
        source().replace("residual = intermediate_tensors", "residual = aux_layer_ids = intermediate_tensors"),
        "aux_layer_ids",
        id="ids-name-taken",
    ),
]


MIXIN_LOOP = """\
        aux_hidden_states = self._maybe_add_hidden_state([], 0, hidden_states, residual)
        for layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), start=self.start_layer):
            hidden_states, residual = layer(positions, hidden_states, residual)
            self._maybe_add_hidden_state(aux_hidden_states, layer_idx + 1, hidden_states, residual)"""
MIXIN_SOURCE = source(loop=MIXIN_LOOP).replace(
    "class ToyModel(nn.Module)", "class ToyModel(nn.Module, EagleModelMixin)"
)
"""Upstream's collecting decoder (Qwen3-Next on 0.20-0.23) under a causal LM without the protocol."""


FRESH_MIXIN_OVERRIDE = '''
    def _maybe_add_hidden_state(self, aux_hidden_states, layer_idx, hidden_states, residual):  # vllm-eagle3-patch
        """EagleModelMixin's capture, but a copy where it would append the bare tensor the next layer writes into."""
        if layer_idx in self.aux_hidden_state_layers:
            aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)
        return aux_hidden_states
'''
"""The mixin's capture as the decoders this tool exposes run it: a copy where upstream appends the bare tensor."""


def test_a_collecting_mixin_decoder_keeps_its_forward_and_the_causal_lm_gets_the_rest():
    """Half native: the runner refuses the causal LM, so it gains the protocol and both methods; the
    decoder keeps upstream's capture, its ids made global on every stage (the capture before the loop
    names the stage's first layer, ``self.start_layer``, not 0) and set by ``__init__`` as everywhere,
    and the mixin's capture appends a copy where it would append the bare tensor."""
    patched = DecoderPatch(TOY).examine(MIXIN_SOURCE, reader(runner=MIXIN_RUNNER), Options()).patched
    model_part, causal_lm_part = patched.split("class ToyForCausalLM")
    expected = (
        MIXIN_SOURCE.split("class ToyForCausalLM")[0]
        .replace(
            "from .interfaces import SupportsPP",
            "from .interfaces import SupportsPP, SupportsEagle3  # vllm-eagle3-patch",
        )
        .replace(
            "        self.layers = make_layers(config)\n",
            "        self.layers = make_layers(config)\n"
            "        self.aux_hidden_state_layers = tuple[int, ...]()  # vllm-eagle3-patch\n",
        )
        .replace(
            "self._maybe_add_hidden_state([], 0, hidden_states, residual)\n",
            "self._maybe_add_hidden_state([], self.start_layer, hidden_states, residual)  # vllm-eagle3-patch\n",
        )
    )
    assert model_part.rstrip() == expected.rstrip() + "\n" + FRESH_MIXIN_OVERRIDE.rstrip()
    assert "SupportsEagle3):  # vllm-eagle3-patch" in causal_lm_part
    assert f"def {DEFAULT_GETTER}(self) -> tuple[int, ...]:  # vllm-eagle3-patch" in causal_lm_part
    assert "self.model.aux_hidden_state_layers = layers" not in causal_lm_part  # through the decoder variable:
    assert "    decoder.aux_hidden_state_layers = layers\n" in causal_lm_part  # the mixin reads that attribute


def test_a_mixin_decoder_with_local_ids_is_refused():
    """A mixin loop not enumerated from self.start_layer would capture stage-local ids."""
    local = MIXIN_SOURCE.replace(", start=self.start_layer)", ")")
    verdict = DecoderPatch(TOY).examine(local, reader(runner=MIXIN_RUNNER), Options())
    assert verdict.state is State.UNSUPPORTED and "enumerated from self.start_layer" in verdict.reason


@pytest.mark.parametrize(("code", "reason"), REFUSED)
def test_unrecognised_sources_are_refused_with_the_reason(code, reason):
    verdict = DecoderPatch(TOY).examine(code, reader(), Options())
    assert verdict.state is State.UNSUPPORTED and reason in verdict.reason
    assert verdict.patched is None


@pytest.mark.parametrize(
    ("code", "read", "state", "reason"),
    [
        (source(), reader(), State.UNPATCHED, "patchable"),
        (patch(source()), reader(), State.PATCHED, "carries"),
        (source(), reader(runner="nothing here"), State.UNSUPPORTED, "no EAGLE-3"),
        (source(), reader(runner=MIXIN_RUNNER), State.UNPATCHED, "patchable"),
        (source(bases="nn.Module, SupportsPP, SupportsEagle3"), reader(), State.NATIVE, "already implements"),
        (
            source().replace("class ToyModel(nn.Module)", "class ToyModel(nn.Module, EagleModelMixin)"),
            reader(),
            State.UNSUPPORTED,
            "does not capture with self._maybe_add_hidden_state",
        ),
        (MIXIN_SOURCE, reader(runner=MIXIN_RUNNER), State.UNPATCHED, "patchable"),
        (
            source().replace(
                "        return self.model(x)\n",
                "        return self.model(x)\n\n    def get_eagle3_aux_hidden_state_layers(self):\n        return (1,)\n",
            ),
            reader(),
            State.NATIVE,
            "already implements",
        ),
        (
            source().replace(
                "        return self.model(x)\n",
                f"        return self.model(x)\n\n    def {DEFAULT_GETTER}(self):\n        return (1,)\n",
            ),
            reader(runner=MIXIN_RUNNER),
            State.NATIVE,
            "already implements",
        ),
    ],
    ids=[
        "unpatched",
        "patched",
        "no-eagle3",
        "mixin-release",
        "protocol-base",
        "mixin-without-capture",
        "mixin-collecting",
        "getter",
        "default-getter",
    ],
)
def test_target_states(code, read, state, reason):
    verdict = DecoderPatch(TOY).examine(code, read, Options())
    assert verdict.state is state and reason in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    ("runner", "getter", "other"),
    [(RUNNER_WITH_EAGLE3, GETTER, DEFAULT_GETTER), (MIXIN_RUNNER, DEFAULT_GETTER, GETTER)],
)
def test_the_getter_is_named_as_the_release_runner_asks(runner, getter, other):
    """From 0.18.0 the runner asks get_eagle3_default_aux_hidden_state_layers; the model and the
    wrapper must answer under that name, or SupportsEagle3's default (the mixin's) would."""
    read = reader(runner=runner, model=source())
    model = DecoderPatch(TOY).examine(source(), read, Options()).patched
    found = FoundWrapper(Wrapper("model_executor/models/toy_mm.py", "ToyForConditionalGeneration"), "Toy", TOY)
    wrapper = FoundWrappersPatch(found.wrapper.path, (found,)).examine(WRAPPER_SOURCE, read, Options()).patched
    assert f"    def {getter}(self) -> tuple[int, ...]:  # vllm-eagle3-patch\n" in model
    assert f"        return self.language_model.{getter}()\n" in wrapper
    assert other not in model + wrapper
    fixed = DecoderPatch(TOY).examine(source(), read, Options(aux_layers=(1, 2, 3))).patched
    assert f"    def {getter}(self) -> tuple[int, ...]:  # vllm-eagle3-patch\n" in fixed and other not in fixed


def test_protocol_follows_the_release():
    without = DecoderPatch(TOY).examine(
        source(), reader(runner(protocol=False), interfaces="class SupportsPP: ..."), Options()
    )
    assert without.state is State.UNPATCHED and "SupportsEagle3" not in without.patched
    assert "SupportsEagle3" in DecoderPatch(TOY).examine(source(), reader(), Options()).patched


@pytest.mark.parametrize("docstring", ["", '    """The decoder."""\n'])
def test_ids_declared_on_the_class_come_first_after_the_docstring(docstring: str) -> None:
    """For families whose subclasses elsewhere skip the model's ``__init__`` (Qwen3-Next)."""
    family = Family("Toy", TOY.path, "ToyModel", "ToyForCausalLM", ("toy",), ids_on_the_class=True)
    code = source().replace("class ToyModel(nn.Module):\n\n", f"class ToyModel(nn.Module):\n{docstring}\n")
    after = DecoderEagle3(family).transform_module(cst.parse_module(code)).code
    declared = "    aux_hidden_state_layers: tuple[int, ...] = ()  # vllm-eagle3-patch\n"
    assert f"class ToyModel(nn.Module):\n{docstring}{declared}\n    def __init__" in after
    assert "self.aux_hidden_state_layers = tuple[int, ...]()  # vllm-eagle3-patch" in after
    assert declared not in patch(code)  # only where the family asks for it


UPSTREAM_INIT = """\
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = make_embedding(config)
        self.layers = make_layers(config)
        self.aux_hidden_state_layers: tuple[int, ...] = ()
"""

UPSTREAM_COLLECTING_LOOP = """\
        aux_hidden_states = []
        for layer_idx, layer in enumerate(
            islice(self.layers, self.start_layer, self.end_layer),
            start=self.start_layer,
        ):
            if layer_idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(
                    hidden_states + residual if residual is not None else hidden_states
                )
            hidden_states, residual = layer(positions=positions, hidden_states=hidden_states, residual=residual)"""

UPSTREAM_TAIL = NORM_TAIL.replace(
    "        return hidden_states",
    "        if aux_hidden_states:\n            return hidden_states, aux_hidden_states\n        return hidden_states",
)


def upstream_collecting_source() -> str:
    """Shaped like Qwen3-Next on 0.18-0.19: upstream's forward captures the ids, its causal LM lacks the methods."""
    init = (
        "    def __init__(self, config):\n        super().__init__()\n"
        "        self.embed_tokens = make_embedding(config)\n        self.layers = make_layers(config)\n"
    )
    return source(loop=UPSTREAM_COLLECTING_LOOP, tail=UPSTREAM_TAIL).replace(init, UPSTREAM_INIT)


class TestUpstreamCollectingForward(CodemodTest):
    TRANSFORM = as_codemod(DecoderEagle3)

    def test_upstream_capture_gives_way_and_the_last_id_and_the_methods_are_added(self) -> None:
        """Upstream's capture appends the bare ``hidden_states`` before the first layer: this tool's, a copy
        there, takes its place; id ``end_layer`` and the methods are added."""
        before = upstream_collecting_source()
        upstream = (
            "            if layer_idx in self.aux_hidden_state_layers:\n"
            "                aux_hidden_states.append(\n"
            "                    hidden_states + residual if residual is not None else hidden_states\n"
            "                )\n"
        )
        capture = (
            "            if layer_idx in self.aux_hidden_state_layers:  # vllm-eagle3-patch\n"
            "                aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)\n"
        )
        capture_last = (
            "        if self.end_layer in self.aux_hidden_state_layers:  # vllm-eagle3-patch\n"
            "            aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)\n"
        )
        assert upstream in before
        after = (
            before.replace(upstream, capture)
            .replace("import SupportsPP\n", "import SupportsPP, SupportsEagle3  # vllm-eagle3-patch\n")
            .replace("        hidden_states, _ = self.norm(", capture_last + "        hidden_states, _ = self.norm(")
            .replace(
                "class ToyForCausalLM(nn.Module, SupportsPP):",
                "class ToyForCausalLM(nn.Module, SupportsPP, SupportsEagle3):  # vllm-eagle3-patch",
            )
            + METHODS
        )
        self.assertCodemod(before, after, TOY)


class TestInheritedForward(CodemodTest):
    TRANSFORM = as_codemod(DecoderEagle3)

    def test_init_and_causal_lm_only(self) -> None:
        """Shaped like Qwen3.5 on 0.17.x: its model runs Qwen3-Next's forward but skips its ``__init__``."""
        after = (
            CHILD_SOURCE.replace("import SupportsPP\n", "import SupportsPP, SupportsEagle3  # vllm-eagle3-patch\n")
            .replace(
                "        self.layers = make_layers(config)\n",
                "        self.layers = make_layers(config)\n        self.aux_hidden_state_layers = tuple[int, ...]()  # vllm-eagle3-patch\n",
            )
            .replace(
                "class ChildForCausalLM(nn.Module, SupportsPP):",
                "class ChildForCausalLM(nn.Module, SupportsPP, SupportsEagle3):  # vllm-eagle3-patch",
            )
            + METHODS
        )
        self.assertCodemod(CHILD_SOURCE, after, CHILD)


@pytest.mark.parametrize(
    ("code", "model", "state", "reason"),
    [
        (CHILD_SOURCE, source(), State.UNPATCHED, "patchable"),
        (CHILD_SOURCE, patch(source()), State.UNPATCHED, "patchable"),
        (CHILD_SOURCE, source(loop="        pass"), State.UNSUPPORTED, "toy.py is unsupported: expected a loop"),
        (CHILD_SOURCE, None, State.UNSUPPORTED, "toy.py is missing"),
        (
            CHILD_SOURCE.replace("(ToyModel)", "(nn.Module)"),
            source(),
            State.UNSUPPORTED,
            "expected ChildModel to subclass ToyModel",
        ),
        (
            CHILD_SOURCE.replace(
                "\n\nclass ChildForCausalLM",
                "\n    def forward(self, x):\n        return x\n\n\nclass ChildForCausalLM",
            ),
            source(),
            State.UNSUPPORTED,
            "ChildModel defines its own forward",
        ),
    ],
    ids=["parent-patchable", "parent-patched", "parent-unsupported", "parent-missing", "not-a-subclass", "own-forward"],
)
def test_an_inherited_forward_follows_its_family(code, model, state, reason):
    files = {} if model is None else {"model": model}
    verdict = DecoderPatch(CHILD).examine(code, reader(**files), Options())
    assert verdict.state is state and reason in verdict.reason, verdict.reason


# --------------------------------------------------------------------------- across pipeline ranks (0.30.0+)


@pytest.mark.parametrize("shape", ["pair-islice", "single-h-gpt2", "no-pipeline-single"])
def test_the_methods_reach_the_decoder_under_its_own_attributes(shape):
    """``self.model.h``, ``self.model.layers``; no pipeline check where there is no stage."""
    decoder = "model"
    patched = DecoderEagle3(toy_family(f"self.{decoder}"), protocol=False, getter="get_ids").transform_module(
        cst.parse_module(toy_source(shape, decoder))
    )
    namespace = load(patched.code)
    causal_lm = object.__new__(namespace["ToyForCausalLM"])
    inner = types.SimpleNamespace(start_layer=0, aux_hidden_state_layers=())
    setattr(inner, LOOPS[shape][4], [None] * 61)
    setattr(causal_lm, decoder, inner)
    causal_lm.set_aux_hidden_state_layers((1, 2, 3))
    assert inner.aux_hidden_state_layers == (1, 2, 3)
    assert causal_lm.get_ids() == (2, 30, 58)
    assert ("start_layer" in patched.code) == (shape != "no-pipeline-single")


def test_two_causal_lms_holding_one_model_patch_it_once():
    one_patch = DecoderPatch(toy_family(), toy_family(causal_lm="ToyChatForCausalLM"))
    verdict = one_patch.examine(toy_source("pair-islice"), reader(), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    code = verdict.patched
    assert code.count("aux_layer_ids = self.aux_hidden_state_layers") == 1
    assert code.count(IMPORT) == 1
    namespace = load(code.replace(IMPORT, ""), Eagle3)
    for causal_lm in ("ToyForCausalLM", "ToyChatForCausalLM"):
        assert Eagle3 in namespace[causal_lm].__mro__
        assert "set_aux_hidden_state_layers" in vars(namespace[causal_lm])
