"""What the inner tests assert of a patched decoder's output and of the causal LM, shared by DeepSeek's spec
(``test_eagle3_behaviour``) and the other families' (``test_family_behaviour``)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import harness
import pytest
import torch
from harness import Reference, Stage
from packaging.version import Version


def assert_same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Bit-for-bit equality, with a readable message."""
    assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert torch.equal(actual, expected), f"{what}:\n{actual}\n!=\n{expected}"


def assert_captured(out: object, stage: Stage, ref: Reference, ids: Sequence[int]) -> None:
    """``out`` is ``(normed output, captured states in layer order)``."""
    assert isinstance(out, tuple) and len(out) == 2, (
        f"expected (hidden_states, aux_hidden_states), got {type(out).__name__}"
    )
    hidden_states, aux = out
    assert ref.output is not None
    assert_same(hidden_states, ref.output, "normed output")
    assert isinstance(aux, (list, tuple)), f"aux_hidden_states is {type(aux).__name__}"
    expected = ref.expected_aux(ids, stage.end_layer)
    assert len(aux) == len(expected), f"captured {len(aux)} states, expected {len(expected)}"
    for position, (got, want) in enumerate(zip(aux, expected)):
        assert_same(got, want, f"aux_hidden_states[{position}] for ids {tuple(ids)}")


def assert_intermediate(out: object, stage: Stage, ref: Reference) -> None:
    """A non-last rank returns the real ``IntermediateTensors`` with the usual keys."""
    assert isinstance(out, stage.intermediate_tensors_class), (
        f"a non-last rank must return IntermediateTensors, got {type(out).__name__}"
    )
    assert set(out.tensors) == {"hidden_states", "residual"}
    assert_same(out["hidden_states"], ref.hidden_states, "hidden_states sent on")
    assert ref.residual is not None
    assert_same(out["residual"], ref.residual, "residual sent on")


def release_supports_eagle3() -> object:
    """``interfaces.supports_eagle3``, or a skip: the protocol first shipped in 0.10.1."""
    interfaces = importlib.import_module("vllm.model_executor.models.interfaces")
    if not hasattr(interfaces, "supports_eagle3"):
        assert harness.vllm_version() < Version("0.10.1"), "supports_eagle3 missing from interfaces"
        pytest.skip(
            f"vLLM {harness.vllm_version()} has no SupportsEagle3 protocol (added in 0.10.1); its runner "
            "calls the two methods by name, covered by the delegation tests"
        )
    return interfaces.supports_eagle3
