"""The two ``SupportsEagle3`` methods as ``patches/eagle3_methods.py`` writes them, run on stand-in decoders (no vLLM
code here): the setter reaches the decoder (or refuses an id an earlier pipeline rank holds, naming the rank), the
getter gives the default ids or the fixed ones (checked against the layer count), and the delegating forms hand
both on (or refuse by name a language model without them)."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest

from vllm_eagle3_patch.eagle3.release import DEFAULT_GETTER, GETTER
from vllm_eagle3_patch.patches.eagle3_methods import (
    checked_delegating_methods,
    delegating_methods,
    eagle3_methods,
    mixin_setter,
)
from vllm_eagle3_patch.patches.pipeline_relay import MIXIN_RELAYS

pytestmark = pytest.mark.unit


def written_class(methods: str) -> type:
    """A class holding the written methods, as the codemods add them to a causal LM or a wrapper."""
    namespace: dict = {}
    exec("class Target:\n" + textwrap.indent(methods, "    "), namespace)  # noqa: S102 (the written source, run)
    return namespace["Target"]


def decoder(n: int, start_layer: int = 0) -> types.SimpleNamespace:
    return types.SimpleNamespace(layers=[None] * n, start_layer=start_layer, aux_hidden_state_layers=())


def target(methods: str, held: object, attribute: str = "model") -> object:
    obj = written_class(methods)()
    setattr(obj, attribute, held)
    return obj


@pytest.mark.parametrize(
    ("n", "ids"), [(61, (2, 30, 58)), (7, (2, 3, 4)), (6, (2, 3, 4)), (5, (1, 2, 3)), (2, (0, 1, 2))]
)
def test_the_default_ids_are_distinct_where_the_layers_allow(n: int, ids: tuple[int, ...]) -> None:
    assert getattr(target(eagle3_methods("self.model", None), decoder(n)), GETTER)() == ids


def test_a_one_layer_model_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="vllm-eagle3-patch: EAGLE-3 needs 3 distinct aux hidden states"):
        getattr(target(eagle3_methods("self.model", None), decoder(1)), GETTER)()


def test_fixed_ids_are_given_and_checked_against_the_layer_count() -> None:
    methods = eagle3_methods("self.model", (1, 2, 3), getter=DEFAULT_GETTER)
    assert getattr(target(methods, decoder(8)), DEFAULT_GETTER)() == (1, 2, 3)
    with pytest.raises(ValueError, match=r"ids \(1, 2, 3\) must lie in 0\.\.2"):
        getattr(target(methods, decoder(2)), DEFAULT_GETTER)()


def test_the_setter_reaches_the_decoder_on_its_rank() -> None:
    held = decoder(8)
    target(eagle3_methods("self.model", None), held).set_aux_hidden_state_layers((1, 4, 6))
    assert held.aux_hidden_state_layers == (1, 4, 6)


def test_an_id_on_an_earlier_pipeline_rank_is_refused_naming_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks of 4 layers each; the drafter's rank holds layers 4..7, and id 1 lies on rank 0."""
    parallel_state = types.ModuleType("vllm.distributed.parallel_state")
    parallel_state.get_pp_group = lambda: types.SimpleNamespace(world_size=2)  # type: ignore[attr-defined]
    utils = types.ModuleType("vllm.distributed.utils")
    utils.get_pp_indices = lambda n, rank, ranks: (rank * n // ranks, (rank + 1) * n // ranks)  # type: ignore[attr-defined]
    for name, module in {
        "vllm": types.ModuleType("vllm"),
        "vllm.distributed": types.ModuleType("vllm.distributed"),
        "vllm.distributed.parallel_state": parallel_state,
        "vllm.distributed.utils": utils,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    held = decoder(8, start_layer=4)
    written = target(eagle3_methods("self.model", None), held)
    with pytest.raises(ValueError, match="aux layer id 1 lies on pipeline rank 0.*holds layers 4..7"):
        written.set_aux_hidden_state_layers((1, 5, 6))
    assert held.aux_hidden_state_layers == ()
    written.set_aux_hidden_state_layers((4, 5, 6))
    assert held.aux_hidden_state_layers == (4, 5, 6)


def test_an_upstream_mixin_decoder_lays_out_its_own_ids() -> None:
    calls: list = []
    held = types.SimpleNamespace(_set_aux_hidden_state_layers=calls.append, layers=[None] * 8)
    assert mixin_setter("self.model") in eagle3_methods("self.model", None, over_ranks=MIXIN_RELAYS)
    target(eagle3_methods("self.model", None, over_ranks=MIXIN_RELAYS), held).set_aux_hidden_state_layers((1, 2, 3))
    assert calls == [(1, 2, 3)]


def test_a_wrapper_hands_both_methods_on() -> None:
    calls: list = []
    inner = types.SimpleNamespace(set_aux_hidden_state_layers=calls.append, **{GETTER: lambda: (7, 8, 9)})
    written = target(delegating_methods("self.language_model"), inner, "language_model")
    written.set_aux_hidden_state_layers((4, 5))
    assert calls == [(4, 5)] and getattr(written, GETTER)() == (7, 8, 9)


def test_a_checkpoints_language_model_without_eagle3_is_refused_by_name() -> None:
    written = target(checked_delegating_methods("self.language_model"), types.SimpleNamespace(), "language_model")
    with pytest.raises(ValueError, match="SimpleNamespace \\(named by the checkpoint's text config\\) does not"):
        written.set_aux_hidden_state_layers((4, 5))
