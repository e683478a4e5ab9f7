"""The convention logic shared by ``apply --aux-layers-from`` and ``doctor``, on config shapes
of public drafters (synthetic config.json files; no weights, no vLLM code)."""

from __future__ import annotations

import json

import pytest

from vllm_eagle3_patch.drafters.drafter_config import (
    Convention,
    DrafterIds,
    Location,
    drafter_ids,
    ids_for_apply,
    infer_convention,
    read_config,
    tensor_shapes,
)
from vllm_eagle3_patch.eagle3 import layer_ids
from vllm_eagle3_patch.eagle3.release import DRAFTER_IDS_FIELD
from vllm_eagle3_patch.errors import ToolError

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

SPECFORGE_DEEPSEEK_V3 = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {DRAFTER_IDS_FIELD: [1, 29, 57]}}
SPECFORGE_KIMI_K2 = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {DRAFTER_IDS_FIELD: [2, 30, 58]}}
TOP_LEVEL = {"architectures": ["LlamaForCausalLMEagle3"], DRAFTER_IDS_FIELD: [3, 31, 59]}


def write(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(
    ("config", "location", "ids"),
    [
        (SPECFORGE_DEEPSEEK_V3, Location.EAGLE_CONFIG, (1, 29, 57)),
        (TOP_LEVEL, Location.TOP_LEVEL, (3, 31, 59)),
        ({"architectures": ["LlamaForCausalLMEagle3"]}, Location.ABSENT, None),
        ({**TOP_LEVEL, "eagle_config": {DRAFTER_IDS_FIELD: [1, 2, 3]}}, Location.TOP_LEVEL, (3, 31, 59)),
    ],
)
def test_where_the_ids_are(tmp_path, config, location, ids):
    found = drafter_ids(read_config(write(tmp_path, config), "drafter"))
    assert (found.location, found.ids) == (location, ids)


@pytest.mark.parametrize(
    ("found", "num_layers", "convention", "reason"),
    [
        pytest.param(
            DrafterIds(Location.EAGLE_CONFIG, (1, 29, 57)), None, Convention.SGLANG, "n = 61", id="specforge-v3"
        ),
        pytest.param(
            DrafterIds(Location.EAGLE_CONFIG, (1, 29, 57)), 61, Convention.SGLANG, "minus one", id="specforge-v3-target"
        ),
        pytest.param(
            DrafterIds(Location.TOP_LEVEL, (1, 29, 57)), 61, Convention.SGLANG, "minus one", id="top-level-minus-one"
        ),
        pytest.param(
            DrafterIds(Location.EAGLE_CONFIG, (1, 29, 57)), 40, None, "do not tell", id="pattern-of-another-n"
        ),
        pytest.param(
            DrafterIds(Location.EAGLE_CONFIG, (2, 30, 58)), 61, None, "vLLM's default for 61", id="specforge-kimi-k2"
        ),
        pytest.param(DrafterIds(Location.EAGLE_CONFIG, (5, 9, 20)), None, None, "do not tell", id="nested-other"),
        pytest.param(DrafterIds(Location.TOP_LEVEL, (3, 31, 59)), 61, Convention.VLLM, "top level", id="top-level"),
        pytest.param(DrafterIds(Location.ABSENT), 61, None, "no ids", id="absent"),
    ],
)
def test_convention_is_inferred_only_from_evidence(found, num_layers, convention, reason):
    inference = infer_convention(found, num_layers)
    assert inference.convention is convention
    assert reason in inference.reason


def test_sglang_ids_are_one_higher_in_vllm():
    assert Convention.SGLANG.to_vllm((1, 29, 57)) == (2, 30, 58)
    assert Convention.VLLM.to_vllm((1, 29, 57)) == (1, 29, 57)


def test_apply_ids_from_a_specforge_drafter_are_converted_and_explained(tmp_path):
    chosen = ids_for_apply(write(tmp_path, SPECFORGE_DEEPSEEK_V3), None)
    assert chosen.ids == (2, 30, 58) and chosen.convention is Convention.SGLANG
    assert "sglang" in chosen.explanation and "vLLM ids: 2, 30, 58" in chosen.explanation


def test_apply_ids_that_cannot_be_told_are_refused_without_a_choice(tmp_path):
    with pytest.raises(ToolError, match="--ids-convention vllm or --ids-convention sglang"):
        ids_for_apply(write(tmp_path, SPECFORGE_KIMI_K2), None)
    assert ids_for_apply(tmp_path, Convention.SGLANG).ids == (3, 31, 59)
    assert ids_for_apply(tmp_path, Convention.VLLM).ids == (2, 30, 58)


def test_an_explicit_choice_against_the_evidence_is_kept_and_flagged(tmp_path):
    chosen = ids_for_apply(write(tmp_path, SPECFORGE_DEEPSEEK_V3), Convention.VLLM)
    assert chosen.ids == (1, 29, 57)
    assert "suggests sglang" in chosen.explanation


@pytest.mark.parametrize(
    ("num_layers", "expected"),
    [
        (1, None),
        (2, (0, 1, 2)),
        (3, (0, 1, 2)),
        (4, (1, 2, 3)),
        (5, (1, 2, 3)),
        (6, (2, 3, 4)),
        (7, (2, 3, 4)),
        (8, (2, 4, 5)),
        (61, (2, 30, 58)),
    ],
)
def test_patched_default_ids_are_three_distinct_increasing_states(num_layers, expected):
    ids = layer_ids.patched_default(num_layers)
    assert ids == expected
    if ids is not None:
        assert len(set(ids)) == 3 and list(ids) == sorted(ids) and all(0 <= i <= num_layers for i in ids)


def test_safetensors_headers_give_shapes_without_weights(tmp_path):
    header = json.dumps({"d2t": {"dtype": "I64", "shape": [32000], "data_offsets": [0, 256000]}, "__metadata__": {}})
    data = len(header).to_bytes(8, "little") + header.encode()
    (tmp_path / "model.safetensors").write_bytes(data)  # the weights themselves are not needed
    (tmp_path / "broken.safetensors").write_bytes(b"\xff" * 8)
    assert tensor_shapes(tmp_path) == {"d2t": [32000]}
