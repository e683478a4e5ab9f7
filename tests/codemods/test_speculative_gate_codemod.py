"""The speculative-config gate codemod on small synthetic sources."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.as_codemod import as_codemod
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.codemod.target import Options, State
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.patches.speculative_gate import SpeculativeGate, SpeculativeGateTarget
from vllm_eagle3_patch.registry import gated_model_types

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

TARGET = SpeculativeGateTarget(gated_model_types())

WHITELIST = """\
class SpeculativeConfig:
    def _verify_args(self):
        eagle3_target_supported = {listed}
        if self.method == "eagle3" and not any(
                m in self.target_model_config.hf_text_config.model_type for m in eagle3_target_supported):
            raise ValueError("Eagle3 is only supported for ...")
"""

OTHERS = '"glm_moe_dsa", "glm4_moe", "gemma3", "gemma3_text", "bailing_moe", "minimax_m2", "longcat_flash"'
QWEN = '"qwen3_next", "qwen3_5", "qwen3_5_text"'
FAMILIES = f"{OTHERS}, {QWEN}, " + '"phi3"'
"""GLM-5's type (its causal LM subclasses DeepSeek's) and the families', appended after DeepSeek's own
(see ``vllm_eagle3_patch.registry``)."""
BESIDE_QWEN = f"{OTHERS}, " + '"phi3"'
"""The same where the whitelist lists ``qwen``, which admits Qwen3-Next's and Qwen3.5's types."""

LLAMA_ONLY = """\
class SpeculativeConfig:
    def _verify_args(self):
        if self.method == "eagle3" and self.target_model_config and \\
            "llama" not in self.target_model_config.hf_text_config.model_type:
            raise ValueError("Eagle3 is only supported for Llama models.")
"""


class TestSpeculativeGate(CodemodTest):
    TRANSFORM = as_codemod(SpeculativeGate)

    def test_whitelist_gets_the_missing_model_types(self) -> None:
        before = WHITELIST.format(listed='["llama", "qwen"]')
        after = WHITELIST.format(
            listed='["llama", "qwen", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", '
            + BESIDE_QWEN
            + "]  # vllm-eagle3-patch"
        )
        self.assertCodemod(before, after, gated_model_types())

    def test_types_already_accepted_are_not_added(self) -> None:
        """Entries match by substring: ``deepseek_v3`` already admits ``deepseek_v32``."""
        before = WHITELIST.format(listed='["llama", "deepseek_v3"]')
        after = WHITELIST.format(
            listed='["llama", "deepseek_v3", "deepseek_v2", "kimi_k2", ' + FAMILIES + "]  # vllm-eagle3-patch"
        )
        self.assertCodemod(before, after, gated_model_types())

    def test_a_whitelist_with_deepseek_gets_the_families(self) -> None:
        """0.18.0-0.21.x list DeepSeek and Kimi-K2 themselves, but none of the families."""
        listed = '"llama", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"'
        before = WHITELIST.format(listed=f"[{listed}]").replace(
            "eagle3_target_supported", "aux_hidden_states_supported"
        )
        after = WHITELIST.format(listed=f"[{listed}, {FAMILIES}]  # vllm-eagle3-patch").replace(
            "eagle3_target_supported", "aux_hidden_states_supported"
        )
        self.assertCodemod(before, after, gated_model_types())

    def test_multi_line_whitelist_keeps_one_item_per_line(self) -> None:
        before = WHITELIST.format(listed='[\n            "llama",\n            "qwen",\n        ]')
        after = WHITELIST.format(
            listed='[\n            "llama",\n            "qwen",\n            "deepseek_v2",\n            "deepseek_v3",\n'
            '            "deepseek_v32",\n            "kimi_k2",\n'
            + "".join(f"            {t},\n" for t in BESIDE_QWEN.split(", "))
            + "        ]  # vllm-eagle3-patch"
        )
        self.assertCodemod(before, after, gated_model_types())

    def test_llama_only_gate_accepts_llama_and_the_new_types(self) -> None:
        after = LLAMA_ONLY.replace(
            '"llama" not in self.target_model_config.hf_text_config.model_type:',
            "not any(supported in self.target_model_config.hf_text_config.model_type for supported in "
            '("llama", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", '
            + FAMILIES
            + ")):  # vllm-eagle3-patch",
        )
        self.assertCodemod(LLAMA_ONLY, after, gated_model_types())


def examine(code: str):
    return TARGET.examine(code, Release(Path("/nowhere"), lambda path: None), Options())


@pytest.mark.parametrize(
    ("code", "state"),
    [
        (WHITELIST.format(listed='["llama"]'), State.UNPATCHED),
        (LLAMA_ONLY, State.UNPATCHED),
        ("class SpeculativeConfig:\n    method = 'eagle3'\n", State.NATIVE),
        ("class SpeculativeConfig:\n    method = 'eagle'\n", State.UNSUPPORTED),
        (WHITELIST.format(listed='["llama"]') + WHITELIST.format(listed='["qwen"]'), State.UNSUPPORTED),
        (
            WHITELIST.format(listed='["llama"]').replace("eagle3_target_supported", "aux_hidden_states_supported"),
            State.UNPATCHED,
        ),
        (WHITELIST.format(listed='["llama", "deepseek_v2", "deepseek_v3", "kimi_k2"]'), State.UNPATCHED),
        (WHITELIST.format(listed=f'["llama", "deepseek_v2", "deepseek_v3", "kimi_k2", {FAMILIES}]'), State.NATIVE),
    ],
    ids=["whitelist", "llama-only", "no-whitelist", "no-eagle3", "two-whitelists", "renamed", "deepseek-only", "all"],
)
def test_states(code, state):
    assert examine(code).state is state
