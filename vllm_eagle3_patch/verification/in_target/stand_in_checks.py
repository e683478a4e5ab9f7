"""Run by ``vllm-eagle3-patch verify`` inside the target interpreter: import the patched vLLM
and exercise it, on CPU, with stand-in decoder layers and no weights.

It is executed as a script (``python stand_in_checks.py AUX_IDS FAMILIES_JSON GETTER``) so the target
environment needs torch and vLLM's own requirements, not this tool.  ``FAMILIES_JSON`` lists
the model families to check (see :func:`vllm_eagle3_patch.verification.verify.families_to_check`).  It
prints one JSON object: ``{"importable": bool, "error": str | None, "checks": [{"name", "ok", "detail"}]}``.
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
SERVED_LAYERS = 61
"""DeepSeek-V3's layer count: the default ids are checked for a model of that size."""


def main(argv: list[str]) -> dict[str, Any]:
    expected_ids = tuple(int(i) for i in argv[0].split(",")) if argv and argv[0] else None
    families: list[dict[str, Any]] = json.loads(argv[1]) if len(argv) > 1 else []
    getter = argv[2] if len(argv) > 2 else "get_eagle3_aux_hidden_state_layers"
    try:
        import torch  # noqa: F401

        for family in families:
            if family["required"]:
                importlib.import_module(family["module"])
    except BaseException as error:  # noqa: BLE001 - any failure means "cannot import here"
        return {"importable": False, "error": f"{type(error).__name__}: {error}", "checks": []}
    checks: list[tuple[str, Callable[[], str]]] = []
    for family in families:
        try:
            module = importlib.import_module(family["module"])
        except Exception as error:  # noqa: BLE001 - another family's import must not hide the rest
            why = f"{type(error).__name__}: {error}"
            reason = f"not checked: {family['module']} cannot be imported in this interpreter ({why})"
            not_checked = lambda reason=reason: reason  # bound first: mypy cannot type it inside the tuple
            checks.append((f"{family['model']} (not importable here)", not_checked))
            continue
        checks += family_checks(family, module, expected_ids, getter)
    return {"importable": True, "error": None, "checks": [run(name, check) for name, check in checks]}


def family_checks(
    family: dict[str, Any], module: types.ModuleType, expected_ids: tuple[int, ...] | None, getter: str
) -> list[tuple[str, Callable[[], str]]]:
    """The same five checks for every family the tool's catalog describes, the wrapper's delegation where it has
    one; the protocol and the states for a family found by rule (``"by_rule"``), whose decoder may keep its
    layers and itself under other names.  ``getter``: the name the release's runner asks the default ids by."""
    causal_lm, model, decoder = family["causal_lm"], family["model"], family["decoder"]
    protocol = (f"{causal_lm} supports EAGLE-3", lambda: check_protocol(module, causal_lm))
    states = (f"{model}.forward hands the drafter the stream as it was", lambda: check_stream(module.__name__, model))
    if family.get("by_rule"):
        return [protocol, states]
    checks = [
        protocol,
        (f"{causal_lm}.{getter}()", lambda: check_default_ids(module, causal_lm, decoder, expected_ids, getter)),
        (
            f"{causal_lm}.set_aux_hidden_state_layers() reaches the model",
            lambda: check_setter(module, causal_lm, decoder),
        ),
        states,
        (f"{model}.forward unchanged with no ids", lambda: check_unchanged(module, model)),
    ]
    wrappers = [
        (f"{w['cls']} supports EAGLE-3 and delegates", lambda w=w: check_wrapper(w, getter, expected_ids))
        for w in family.get("wrappers", ())
    ]
    return checks + wrappers


def check_stream(module: str, model: str) -> str:
    """``in_place.py``'s check, beside this script (which runs as one: its folder is first on ``sys.path``)."""
    import in_place

    return in_place.check_stream(module, model)


def run(name: str, check: Callable[[], str]) -> dict[str, Any]:
    try:
        return {"name": name, "ok": True, "detail": check()}
    except AssertionError as failure:
        return {"name": name, "ok": False, "detail": str(failure)}
    except Exception as error:  # noqa: BLE001
        last = traceback.extract_tb(error.__traceback__)[-1]
        return {"name": name, "ok": False, "detail": f"{type(error).__name__}: {error} ({last.filename}:{last.lineno})"}


def check_protocol(module: types.ModuleType, causal_lm: str) -> str:
    """The causal LM and every subclass in its file (DeepSeek-V3, ...): what users serve."""
    base = getattr(module, causal_lm)
    served = [
        base,
        *(c for c in vars(module).values() if isinstance(c, type) and c is not base and issubclass(c, base)),
    ]
    names = ", ".join(cls.__name__ for cls in served)
    try:
        from vllm.model_executor.models.interfaces import SupportsEagle3, supports_eagle3
    except ImportError:  # before 0.10.1 the runner calls the methods by name
        for cls in served:
            assert hasattr(cls, "set_aux_hidden_state_layers"), f"{cls.__name__} has no set_aux_hidden_state_layers"
            assert hasattr(cls, "get_eagle3_aux_hidden_state_layers"), (
                f"{cls.__name__} has no get_eagle3_aux_hidden_state_layers"
            )
        return f"both methods present on {names} (this release has no SupportsEagle3 protocol)"
    for cls in served:
        assert supports_eagle3(cls), f"supports_eagle3({cls.__name__}) is False"
        assert SupportsEagle3 in cls.__mro__, f"SupportsEagle3 is not a base of {cls.__name__}"
    return f"supports_eagle3 is True for {names}"


def served_default() -> tuple[int, int, int]:
    """The patched getter's default for a model of ``SERVED_LAYERS`` layers: ``(2, n // 2, n - 3)``."""
    n = SERVED_LAYERS
    return (2, n // 2, n - 3)


def bare(cls: type) -> Any:
    """An instance without running ``__init__`` (which needs a GPU and a config)."""
    from torch import nn

    instance: Any = object.__new__(cls)
    nn.Module.__init__(instance)
    return instance


def attribute(decoder: str) -> str:
    """``self.model`` -> ``model``: where the causal LM keeps its decoder."""
    return decoder.removeprefix("self.")


def check_default_ids(
    module: types.ModuleType, causal_lm: str, decoder: str, expected_ids: tuple[int, ...] | None, getter: str
) -> str:
    model = bare(getattr(module, causal_lm))
    setattr(model, attribute(decoder), types.SimpleNamespace(layers=[None] * SERVED_LAYERS))
    ids = tuple(getattr(model, getter)())
    expected = expected_ids if expected_ids is not None else served_default()
    assert ids == expected, f"returned {ids} for {SERVED_LAYERS} layers, expected {expected}"
    return f"{ids} for {SERVED_LAYERS} layers"


def check_setter(module: types.ModuleType, causal_lm: str, decoder: str) -> str:
    model = bare(getattr(module, causal_lm))
    inner = types.SimpleNamespace(aux_hidden_state_layers=(), start_layer=0, layers=[None] * NUM_LAYERS)
    setattr(model, attribute(decoder), inner)
    model.set_aux_hidden_state_layers((1, 2))
    assert inner.aux_hidden_state_layers == (1, 2), f"{decoder}.aux_hidden_state_layers not set"
    return f"{decoder}.aux_hidden_state_layers == (1, 2)"


class RecordingLayer:
    """Layer ``i``: ``(h * (i + 2), (residual or 0) + h)``, recording the state it was given.

    Families call their layers with different argument orders (``positions`` first or
    ``hidden_states`` first, extra arguments after the residual, or all by keyword): the
    hidden states are the first floating-point tensor, the residual the next argument that is
    one or None (the positions are integers).  What the model feeds the first layer (embeddings, scaled or
    not) is its own business: the captured states are compared with what each layer received.
    """

    def __init__(self, index: int, received: list[Any]) -> None:
        self.index = index
        self.received = received

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if "hidden_states" in kwargs:  # called by keyword (Qwen3-Next)
            hidden_states, residual = kwargs["hidden_states"], kwargs.get("residual")
        else:
            floating = [a is None or (hasattr(a, "is_floating_point") and a.is_floating_point()) for a in args]
            at = next(i for i, a in enumerate(args) if a is not None and floating[i])
            hidden_states = args[at]
            residual = next((a for i, a in enumerate(args) if i > at and floating[i]), kwargs.get("residual"))
        self.received.append(hidden_states if residual is None else hidden_states + residual)
        new_residual = hidden_states if residual is None else residual + hidden_states
        return hidden_states * (self.index + 2), new_residual


def stand_in_norm(hidden_states: Any, residual: Any = None) -> Any:
    """``self.norm`` with or without a residual, as the families call it."""
    if residual is None:
        return hidden_states * 0.5
    return hidden_states + residual, hidden_states + residual


@contextlib.contextmanager
def single_stage(module: types.ModuleType) -> Iterator[None]:
    """One pipeline stage holding every layer: first and last rank at once."""
    group = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0)
    patched: Any = module  # a vLLM module: its get_pp_group is set, which ModuleType does not declare
    saved = patched.get_pp_group
    patched.get_pp_group = lambda: group
    try:
        yield
    finally:
        patched.get_pp_group = saved


def run_forward(module: types.ModuleType, model_class: str, ids: tuple[int, ...]) -> tuple[Any, list[Any]]:
    """The patched ``forward`` over stand-in layers: its output and what each layer received."""
    import torch

    model = bare(getattr(module, model_class))
    received: list[Any] = []
    model.layers = [RecordingLayer(i, received) for i in range(NUM_LAYERS)]
    model.start_layer, model.end_layer = 0, NUM_LAYERS
    model.norm = stand_in_norm
    model.config = types.SimpleNamespace()
    model.aux_hidden_state_layers = ids
    embeds = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 1
    forward_module = importlib.import_module(type(model).forward.__module__)  # Qwen3.5's is Qwen3-Next's
    with single_stage(module), single_stage(forward_module):
        output = model.forward(None, torch.zeros(2, dtype=torch.long), None, inputs_embeds=embeds)
    return output, received


def check_unchanged(module: types.ModuleType, model_class: str) -> str:
    """With no ids asked for, the patched ``forward`` computes and returns what the unpatched one does."""
    import torch

    output, received = run_forward(module, model_class, ())
    assert len(received) == NUM_LAYERS, f"{len(received)} of {NUM_LAYERS} layers ran"
    expected_output = stand_in_norm(*_last_layer_output(received[0]))[0]
    assert isinstance(output, torch.Tensor), f"returned {type(output).__name__}, expected a tensor"
    assert torch.equal(output, expected_output), "output differs from the unpatched computation"
    return "returns the plain tensor, bit for bit"


def _last_layer_output(first_input: Any) -> tuple[Any, Any]:
    """What the last stand-in layer returns when the first receives ``first_input`` and no residual."""
    hidden, residual = first_input * 2, first_input
    for index in range(1, NUM_LAYERS):
        hidden, residual = hidden * (index + 2), residual + hidden
    return hidden, residual


def check_wrapper(wrapper: dict[str, Any], getter: str, expected_ids: tuple[int, ...] | None) -> str:
    """A multimodal wrapper: the protocol, and both methods for its language model, handed on to
    it (a causal LM) or acting on it directly (a bare decoder: Kimi-K2.5 on 0.15.x)."""
    try:
        module = importlib.import_module(wrapper["module"])
    except ImportError as error:  # e.g. an image processor needing torchvision, absent beside a CPU torch
        return (
            f"not checked: {wrapper['module']} cannot be imported in this interpreter ({type(error).__name__}: {error})"
        )
    cls = getattr(module, wrapper["cls"])
    calls: list[Any] = []
    inner = types.SimpleNamespace(
        set_aux_hidden_state_layers=calls.append,
        **{getter: lambda: (7, 8, 9)},
        aux_hidden_state_layers=(),
        start_layer=0,
        layers=[None] * SERVED_LAYERS,
    )
    model = bare(cls)
    setattr(model, attribute(wrapper["language_model"]), inner)
    model.set_aux_hidden_state_layers((4, 5))
    handed_on = calls == [(4, 5)]
    assert handed_on or inner.aux_hidden_state_layers == (4, 5), (
        "set_aux_hidden_state_layers does not reach the language model"
    )
    ids = tuple(getattr(model, getter)())
    expected = (7, 8, 9) if handed_on else (expected_ids if expected_ids is not None else served_default())
    assert ids == expected, f"{getter} returned {ids}, expected {expected}"
    how = "delegate to the language model" if handed_on else "act on its bare decoder"
    try:
        from vllm.model_executor.models.interfaces import supports_eagle3
    except ImportError:
        return f"both methods {how} (this release has no SupportsEagle3 protocol)"
    assert supports_eagle3(cls), f"supports_eagle3({cls.__name__}) is False"
    return f"supports_eagle3 and both methods {how}"


if __name__ == "__main__":
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs on import; stdout is for the result
        result = main(sys.argv[1:])
    print(json.dumps(result))
