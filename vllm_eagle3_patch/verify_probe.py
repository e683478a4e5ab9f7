"""Run by ``vllm-eagle3-patch verify`` inside the target interpreter: import the patched vLLM
and exercise it, on CPU, with stand-in decoder layers and no weights.

It is executed as a script (``python verify_probe.py [AUX_IDS]``) so the target environment
needs torch and vLLM's own requirements, not this tool.  It prints one JSON object:
``{"importable": bool, "error": str | None, "checks": [{"name", "ok", "detail"}]}``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import traceback
import types
from typing import Any, Callable, Iterator

NUM_LAYERS = 8


def main(argv: list[str]) -> dict[str, Any]:
    expected_ids = tuple(int(i) for i in argv[0].split(",")) if argv and argv[0] else None
    try:
        import torch  # noqa: F401

        deepseek = importlib.import_module("vllm.model_executor.models.deepseek_v2")
    except BaseException as error:  # noqa: BLE001 - any failure means "cannot import here"
        return {"importable": False, "error": f"{type(error).__name__}: {error}", "checks": []}
    checks = [
        ("DeepseekV3ForCausalLM supports EAGLE-3", lambda: check_protocol(deepseek)),
        ("get_eagle3_aux_hidden_state_layers()", lambda: check_default_ids(deepseek, expected_ids)),
        ("set_aux_hidden_state_layers() reaches the model", lambda: check_setter(deepseek)),
        ("DeepseekV2Model.forward captures ids 0, 3 and n", lambda: check_forward(deepseek, (0, 3, NUM_LAYERS))),
        ("DeepseekV2Model.forward unchanged with no ids", lambda: check_forward(deepseek, ())),
        ("Kimi-K2.5 wrapper supports EAGLE-3", lambda: check_kimi_k25(expected_ids)),
    ]
    return {"importable": True, "error": None, "checks": [run(name, check) for name, check in checks]}


def run(name: str, check: Callable[[], str]) -> dict[str, Any]:
    try:
        return {"name": name, "ok": True, "detail": check()}
    except AssertionError as failure:
        return {"name": name, "ok": False, "detail": str(failure)}
    except Exception as error:  # noqa: BLE001
        last = traceback.extract_tb(error.__traceback__)[-1]
        return {"name": name, "ok": False, "detail": f"{type(error).__name__}: {error} ({last.filename}:{last.lineno})"}


def check_protocol(deepseek: types.ModuleType) -> str:
    cls = deepseek.DeepseekV3ForCausalLM
    try:
        from vllm.model_executor.models.interfaces import SupportsEagle3, supports_eagle3
    except ImportError:  # before 0.10.1 the runner calls the methods by name
        assert hasattr(cls, "set_aux_hidden_state_layers"), "no set_aux_hidden_state_layers"
        assert hasattr(cls, "get_eagle3_aux_hidden_state_layers"), "no get_eagle3_aux_hidden_state_layers"
        return "both methods present (this release has no SupportsEagle3 protocol)"
    assert supports_eagle3(cls), "supports_eagle3(DeepseekV3ForCausalLM) is False"
    assert SupportsEagle3 in cls.__mro__, "SupportsEagle3 is not a base"
    return "supports_eagle3(DeepseekV3ForCausalLM) is True"


def bare(cls: type) -> Any:
    """An instance without running ``__init__`` (which needs a GPU and a config)."""
    from torch import nn

    instance = object.__new__(cls)
    nn.Module.__init__(instance)
    return instance


def check_default_ids(deepseek: types.ModuleType, expected_ids: tuple[int, ...] | None) -> str:
    model = bare(deepseek.DeepseekV3ForCausalLM)
    model.model = types.SimpleNamespace(layers=[None] * 61)
    ids = tuple(model.get_eagle3_aux_hidden_state_layers())
    expected = expected_ids if expected_ids is not None else (2, 30, 58)
    assert ids == expected, f"returned {ids} for 61 layers, expected {expected}"
    return f"{ids} for 61 layers"


def check_setter(deepseek: types.ModuleType) -> str:
    model = bare(deepseek.DeepseekV3ForCausalLM)
    model.model = types.SimpleNamespace(aux_hidden_state_layers=(), start_layer=0, layers=[None] * NUM_LAYERS)
    model.set_aux_hidden_state_layers((1, 2))
    assert model.model.aux_hidden_state_layers == (1, 2), "model.aux_hidden_state_layers not set"
    return "model.aux_hidden_state_layers == (1, 2)"


class StandInLayer:
    """Layer ``i``: ``(h * (i + 2), (residual or 0) + h)``: cheap, exact, distinct per layer."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, positions: Any, hidden_states: Any, residual: Any, *extra: Any) -> tuple[Any, Any]:
        new_residual = hidden_states if residual is None else residual + hidden_states
        return hidden_states * (self.index + 2), new_residual


@contextlib.contextmanager
def single_stage(deepseek: types.ModuleType) -> Iterator[None]:
    """One pipeline stage holding every layer: first and last rank at once."""
    group = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)
    saved = deepseek.get_pp_group
    deepseek.get_pp_group = lambda: group
    try:
        yield
    finally:
        deepseek.get_pp_group = saved


def check_forward(deepseek: types.ModuleType, ids: tuple[int, ...]) -> str:
    import torch

    model = bare(deepseek.DeepseekV2Model)
    layers = [StandInLayer(i) for i in range(NUM_LAYERS)]
    model.layers = layers
    model.start_layer, model.end_layer = 0, NUM_LAYERS
    model.norm = lambda h, r: (h + r, h + r)
    model.config = types.SimpleNamespace()
    model.aux_hidden_state_layers = ids
    embeds = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 1
    with single_stage(deepseek):
        output = model.forward(None, torch.zeros(2, dtype=torch.long), None, inputs_embeds=embeds)

    expected_states, hidden, residual = [], embeds, None
    for index, layer in enumerate(layers):
        if index in ids:
            expected_states.append(hidden if residual is None else hidden + residual)
        hidden, residual = layer(None, hidden, residual)
    if NUM_LAYERS in ids:
        expected_states.append(hidden + residual)
    expected_hidden = hidden + residual
    if not ids:
        assert isinstance(output, torch.Tensor), f"returned {type(output).__name__}, expected a tensor"
        assert torch.equal(output, expected_hidden), "output differs from the unpatched computation"
        return "returns the plain tensor, bit for bit"
    assert isinstance(output, tuple) and len(output) == 2, f"returned {type(output).__name__}, expected a pair"
    hidden_out, states = output
    assert torch.equal(hidden_out, expected_hidden), "hidden states differ"
    assert len(states) == len(expected_states), f"captured {len(states)} states, expected {len(expected_states)}"
    for layer_id, got, want in zip(sorted(ids), states, expected_states):
        assert torch.equal(got, want), f"state for layer id {layer_id} differs"
    return f"captured {len(states)} states in layer order"


def check_kimi_k25(expected_ids: tuple[int, ...] | None) -> str:
    try:
        kimi = importlib.import_module("vllm.model_executor.models.kimi_k25")
    except ModuleNotFoundError:
        return "no Kimi-K2.5 in this release (nothing to check)"
    from vllm.model_executor.models.interfaces import supports_eagle3

    wrapper = kimi.KimiK25ForConditionalGeneration
    assert supports_eagle3(wrapper), "supports_eagle3(KimiK25ForConditionalGeneration) is False"
    calls: list[Any] = []
    inner = types.SimpleNamespace(
        set_aux_hidden_state_layers=calls.append,
        get_eagle3_aux_hidden_state_layers=lambda: (7, 8, 9),
        aux_hidden_state_layers=(),
        start_layer=0,
        layers=[None] * 61,
    )
    model = bare(wrapper)
    model.language_model = inner
    model.set_aux_hidden_state_layers((4, 5))
    assert calls == [(4, 5)] or inner.aux_hidden_state_layers == (4, 5), "set_aux_hidden_state_layers not delegated"
    ids = tuple(model.get_eagle3_aux_hidden_state_layers())
    direct = expected_ids if expected_ids is not None else (2, 30, 58)  # 0.15.x: acts on the bare decoder
    assert ids in ((7, 8, 9), direct), f"get_eagle3_aux_hidden_state_layers returned {ids}"
    return "supports_eagle3 and both methods delegate to language_model"


if __name__ == "__main__":
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs on import; stdout is for the result
        result = main(sys.argv[1:])
    print(json.dumps(result))
