"""The speculative-config gate codemod on small synthetic sources."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.as_codemod import as_codemod
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.catalog import gated_model_types
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.patches.speculative_gate import SpeculativeGate, SpeculativeGatePatch

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

GATED = gated_model_types()
"""What the tool's gate must admit: its catalog's types, DeepSeek's first, then the families'."""
PATCH = SpeculativeGatePatch(GATED)

WHITELIST = """\
class SpeculativeConfig:
    def _verify_args(self):
        eagle3_target_supported = {listed}
        if self.method == "eagle3" and not any(
                m in self.target_model_config.hf_text_config.model_type for m in eagle3_target_supported):
            raise ValueError("Eagle3 is only supported for ...")
"""

LLAMA_ONLY = """\
class SpeculativeConfig:
    def _verify_args(self):
        if self.method == "eagle3" and self.target_model_config and \\
            "llama" not in self.target_model_config.hf_text_config.model_type:
            raise ValueError("Eagle3 is only supported for Llama models.")
"""


def quoted(model_types: tuple[str, ...]) -> str:
    return ", ".join(f'"{t}"' for t in model_types)


def rejected_by(listed: tuple[str, ...]) -> tuple[str, ...]:
    """The gated types a whitelist of ``listed`` rejects, in the catalog's order: its entries match by substring."""
    return tuple(t for t in GATED if not any(entry in t for entry in listed))


def admitted_unlisted(listed: tuple[str, ...]) -> set[str]:
    """Gated types ``listed`` admits by substring without naming them: what makes a case below a real one."""
    return set(GATED) - set(rejected_by(listed)) - set(listed)


class TestSpeculativeGate(CodemodTest):
    TRANSFORM = as_codemod(SpeculativeGate)

    def test_whitelist_gets_the_missing_model_types(self) -> None:
        """Where the whitelist lists ``qwen``, it admits Qwen3-Next's and Qwen3.5's types already."""
        listed = ("llama", "qwen")
        assert admitted_unlisted(listed)
        before = WHITELIST.format(listed=f"[{quoted(listed)}]")
        after = WHITELIST.format(listed=f"[{quoted(listed + rejected_by(listed))}]  # vllm-eagle3-patch")
        self.assertCodemod(before, after, GATED)

    def test_types_already_accepted_are_not_added(self) -> None:
        """Entries match by substring: ``deepseek_v3`` already admits ``deepseek_v32``."""
        listed = ("llama", "deepseek_v3")
        assert admitted_unlisted(listed)
        before = WHITELIST.format(listed=f"[{quoted(listed)}]")
        after = WHITELIST.format(listed=f"[{quoted(listed + rejected_by(listed))}]  # vllm-eagle3-patch")
        self.assertCodemod(before, after, GATED)

    def test_a_whitelist_with_deepseek_gets_the_families(self) -> None:
        """0.18.0-0.21.x list DeepSeek and Kimi-K2 themselves, but none of the families."""
        listed = ("llama", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")
        before = WHITELIST.format(listed=f"[{quoted(listed)}]").replace(
            "eagle3_target_supported", "aux_hidden_states_supported"
        )
        after = WHITELIST.format(listed=f"[{quoted(listed + rejected_by(listed))}]  # vllm-eagle3-patch").replace(
            "eagle3_target_supported", "aux_hidden_states_supported"
        )
        self.assertCodemod(before, after, GATED)

    def test_multi_line_whitelist_keeps_one_item_per_line(self) -> None:
        listed = ("llama", "qwen")
        before = WHITELIST.format(listed="[\n" + "".join(f'            "{t}",\n' for t in listed) + "        ]")
        after = WHITELIST.format(
            listed="[\n"
            + "".join(f'            "{t}",\n' for t in listed + rejected_by(listed))
            + "        ]  # vllm-eagle3-patch"
        )
        self.assertCodemod(before, after, GATED)

    def test_llama_only_gate_accepts_llama_and_the_new_types(self) -> None:
        after = LLAMA_ONLY.replace(
            '"llama" not in self.target_model_config.hf_text_config.model_type:',
            "not any(supported in self.target_model_config.hf_text_config.model_type for supported in "
            f"({quoted(('llama', *GATED))})):  # vllm-eagle3-patch",
        )
        self.assertCodemod(LLAMA_ONLY, after, GATED)


def examine(code: str):
    return PATCH.examine(code, Release(Path("/nowhere"), lambda path: None), Options())


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
        (WHITELIST.format(listed=f"[{quoted(('llama', *GATED))}]"), State.NATIVE),
    ],
    ids=["whitelist", "llama-only", "no-whitelist", "no-eagle3", "two-whitelists", "renamed", "deepseek-only", "all"],
)
def test_states(code, state):
    assert examine(code).state is state
