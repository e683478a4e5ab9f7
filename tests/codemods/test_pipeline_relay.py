"""A patched decoder's aux states carried across pipeline ranks (0.30.0+, ``patches/pipeline_relay.py``), or the
setter's refusal saying why not, on synthetic decoders (no vLLM code here)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from helpers.decoder_sources import (
    CHILD,
    CHILD_SOURCE,
    INTERFACES_WITH_PROTOCOL,
    NORM_IN_ELSE_TAIL,
    RUNNER_WITH_EAGLE3,
    TOY,
    reader,
    source,
)

from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3, DecoderPatch

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


KEY = "aux_hidden_states_"


def relaying(code: str, relay_key: str | None = KEY) -> str:
    return DecoderEagle3(TOY, relay_key=relay_key).transform_module(cst.parse_module(code)).code


def with_config(code: str) -> str:
    return code.replace(
        "        self.layers = make_layers(config)\n",
        "        self.config = config\n        self.layers = make_layers(config)\n",
        1,
    )


def test_a_decoder_of_the_usual_shape_carries_its_aux_states_across_ranks() -> None:
    """Where the release's runner relays aux states: the decoder declares it as upstream's opted-in models
    do, a non-last rank sends its captures on, the last one puts the earlier ranks' first, and the setter
    counts the ids captured upstream instead of refusing them."""
    after = relaying(with_config(source()))
    model = after[after.index("class ToyModel") : after.index("class ToyForCausalLM")]
    assert (
        "class ToyModel(nn.Module):\n"
        "    supports_aux_hidden_states_over_pp = True  # vllm-eagle3-patch\n"
        '    AUX_HIDDEN_STATE_KEY = "aux_hidden_states_"  # vllm-eagle3-patch\n'
    ) in model
    assert (
        "            return self.aux_hidden_states_sent_on(IntermediateTensors(hidden_states, residual), "
        "aux_hidden_states)  # vllm-eagle3-patch\n"
    ) in model
    received = model.index("if self._aux_upstream_total_cached:  # vllm-eagle3-patch")
    assert model.index("hidden_states, _ = self.norm(") < received < model.index("if aux_hidden_states:")
    assert "def aux_hidden_states_received(self, intermediate_tensors) -> list:  # vllm-eagle3-patch" in model
    causal_lm = after[after.index("class ToyForCausalLM") :]
    assert "decoder._aux_slot_base_cached = len(upstream)" in causal_lm and "lies on pipeline rank" not in causal_lm
    compile(after, "<patched>", "exec")


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        pytest.param(source(), "ToyModel keeps no self.config, by whose hidden_size", id="no-config"),
        pytest.param(
            with_config(source(tail=NORM_IN_ELSE_TAIL)),
            "ToyModel.forward has not one return IntermediateTensors(...) between its loop and its norm",
            id="norm-beside-the-send",
        ),
        pytest.param(
            with_config(source()).replace("intermediate_tensors", "sent"), "ToyModel.forward takes no", id="no-param"
        ),
    ],
)
def test_a_decoder_that_cannot_carry_them_refuses_ids_of_earlier_ranks_saying_why(code: str, reason: str) -> None:
    after = relaying(code)
    assert "supports_aux_hidden_states_over_pp" not in after and "aux_hidden_states_sent_on" not in after
    assert "lies on pipeline rank" in after and reason in after
    compile(after, "<patched>", "exec")


def test_before_the_release_relays_the_setter_names_vllms_limit() -> None:
    after = relaying(with_config(source()), relay_key=None)
    assert "supports_aux_hidden_states_over_pp" not in after
    assert '"this vLLM sends no aux hidden states across ranks: serve with --pipeline-parallel-size 1 "' in after


def test_the_release_says_where_its_runner_relays(tmp_path: Path) -> None:
    """``Eagle3Interface.relay_key``: read from model runner V2's helpers and the mixin's key, never assumed."""
    package = tmp_path / "vllm"
    (package / "v1/worker").mkdir(parents=True)
    (package / "model_executor/models").mkdir(parents=True)
    (package / "v1/worker/gpu_model_runner.py").write_text(RUNNER_WITH_EAGLE3)
    interfaces = package / "model_executor/models/interfaces.py"
    interfaces.write_text(
        'class SupportsEagle3:\n    pass\nclass M:\n    AUX_HIDDEN_STATE_KEY: ClassVar[str] = "aux_"\n'
    )
    assert Release(package).interface.relay_key is None
    relay = package / "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
    relay.parent.mkdir(parents=True)
    relay.write_text("def aux_hidden_state_relay_keys(model):\n    pass\n")
    assert Release(package).interface.relay_key == "aux_"


RELAYING_RELEASE = {
    "interfaces": INTERFACES_WITH_PROTOCOL
    + '\nclass EagleModelMixin:\n    AUX_HIDDEN_STATE_KEY: ClassVar[str] = "aux_"\n',
    "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py": "def aux_hidden_state_relay_keys(model):\n    pass\n",
}


@pytest.mark.parametrize(
    ("parent", "relays"),
    [pytest.param(with_config(source()), True, id="parent-relays"), pytest.param(source(), False, id="parent-cannot")],
)
def test_a_model_running_its_parents_forward_relays_as_the_parent_does(parent: str, relays: bool) -> None:
    """A subclass running a patched forward of another file (LongCat-Flash's n-gram model) gets the relaying
    setter only where that file's patch makes the forward carry aux states across ranks."""
    release = reader(model=parent, **RELAYING_RELEASE)
    verdict = DecoderPatch(CHILD).examine(CHILD_SOURCE, release, Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    child = verdict.patched or ""
    assert ("decoder._aux_slot_base_cached = len(upstream)" in child) is relays
    assert ("ChildModel runs ToyModel's forward, which does not carry them" in child) is not relays


def test_a_model_running_upstreams_mixin_forward_takes_the_mixins_setter() -> None:
    """``Glm4Model(LlamaModel)`` on 0.30.0+: upstream's forward captures and lays out its own pipeline slots;
    the patched causal LM hands the ids to the mixin's setter, which does both, and vLLM's check reads the
    upstream class's flag."""
    family = Family("Toy", TOY.path, "ChildModel", "ChildForCausalLM", ("toy",), runs_upstream_capture=True)
    code = CHILD_SOURCE.replace("class ChildModel(ToyModel):", "class ChildModel(LlamaModel):")
    after = DecoderEagle3(family, relay_key=KEY).transform_module(cst.parse_module(code)).code
    setter = after[
        after.index("def set_aux_hidden_state_layers") : after.index("def get_eagle3_aux_hidden_state_layers")
    ]
    assert "self.model._set_aux_hidden_state_layers(layers)  # upstream's EagleModelMixin" in setter
    assert "lies on pipeline rank" not in setter
    before_relays = DecoderEagle3(family).transform_module(cst.parse_module(code)).code
    assert "lies on pipeline rank" in before_relays and "_set_aux_hidden_state_layers" not in before_relays
