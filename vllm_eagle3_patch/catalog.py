"""The catalog: every place in vLLM this tool patches, and every model family, as data.

A model family is one :class:`~vllm_eagle3_patch.codemod.family.Family` entry of :data:`FAMILIES` (its
multimodal wrappers are found by rule, as every other family's); a kind
of change is one entry of :data:`PATCHES`, which the plan, the support tables and the tests iterate, and
the speculative-config gate admits :func:`gated_model_types`.  Adding a family is adding an entry here (and
its tests: ``docs/architecture.md`` has the checklist).
"""

from __future__ import annotations

from .codemod.family import Family, Wrapper
from .codemod.patch import Patch, Policy
from .eagle3.release import MODELS
from .patch_kinds import Found, Gate, ModelFiles, MultimodalWrappers, OneFile, PatchKind
from .patches.eagle_proposer import EagleProposerPatch

DEEPSEEK_V2 = Family(
    "DeepSeek-V2/V3",
    f"{MODELS}/deepseek_v2.py",
    "DeepseekV2Model",
    "DeepseekV2ForCausalLM",  # V3, V3.2 and Kimi-K2 are subclasses or the same class
    ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"),  # glm_moe_dsa: GLM-5 (0.16.0+)
    policy=Policy.REQUIRED,
)
GLM4_MOE = Family("GLM-4.5 MoE", f"{MODELS}/glm4_moe.py", "Glm4MoeModel", "Glm4MoeForCausalLM", ("glm4_moe",))
GEMMA3 = Family(
    "Gemma 3",
    f"{MODELS}/gemma3.py",
    "Gemma3Model",
    "Gemma3ForCausalLM",
    ("gemma3", "gemma3_text"),
)
BAILING_MOE = Family(
    "Ling (Bailing MoE)", f"{MODELS}/bailing_moe.py", "BailingMoeModel", "BailingMoeForCausalLM", ("bailing_moe",)
)
MINIMAX_M2 = Family("MiniMax-M2", f"{MODELS}/minimax_m2.py", "MiniMaxM2Model", "MiniMaxM2ForCausalLM", ("minimax_m2",))
LONGCAT_FLASH = Family(
    "LongCat-Flash",
    f"{MODELS}/longcat_flash.py",
    "FlashModel",  # each FlashDecoderLayer holds two attention blocks but hands on (hidden_states, residual) as usual
    "LongcatFlashForCausalLM",
    ("longcat_flash",),
)
QWEN3_NEXT = Family(
    "Qwen3-Next",
    f"{MODELS}/qwen3_next.py",
    "Qwen3NextModel",
    "Qwen3NextForCausalLM",
    ("qwen3_next",),  # the whitelists from 0.10.1 on accept it already: "qwen" is matched as a substring
    ids_on_the_class=True,  # qwen3_5.py's Qwen3_5Model (0.17.x) skips Qwen3NextModel.__init__
)
QWEN3_5 = Family(
    "Qwen3.5",
    f"{MODELS}/qwen3_5.py",
    "Qwen3_5Model",
    "Qwen3_5ForCausalLMBase",  # the text-only Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM; the
    # multimodal classes inherit Qwen3-VL's EAGLE-3 methods, which reach the same model
    ("qwen3_5", "qwen3_5_text"),  # accepted as "qwen", like Qwen3-Next
    forward_from=QWEN3_NEXT,
)

FAMILIES = (DEEPSEEK_V2, GLM4_MOE, GEMMA3, BAILING_MOE, MINIMAX_M2, LONGCAT_FLASH, QWEN3_NEXT, QWEN3_5)

NAMED_WRAPPERS = (
    # the seed: Kimi-K2.5 (0.15.0+) holds DeepSeek-V3 (a bare DeepseekV2Model in 0.15.x, a DeepseekV2ForCausalLM
    # from 0.16.0); its text config is a DeepseekV3Config, which the gate knows as deepseek_v3
    Wrapper(f"{MODELS}/kimi_k25.py", "KimiK25ForConditionalGeneration", "Kimi-K2.5"),
    Wrapper(f"{MODELS}/gemma3_mm.py", "Gemma3ForConditionalGeneration", "Gemma 3 multimodal"),
)
"""Multimodal wrappers the support tables and the release tests name.  The multimodal rule (``multimodal.py``)
finds and patches them as it does every other; this list only names them for people."""

GATE_ONLY_MODEL_TYPES = ("phi3",)
"""Families whose model already implements EAGLE-3 (Phi-3 and Phi-4-mini inherit it from
``LlamaForCausalLM``) and are kept out only by the speculative-config gate."""


def gated_model_types() -> tuple[str, ...]:
    """Every family model type the speculative-config gate must accept, in family order."""
    return (*(t for family in FAMILIES for t in family.model_types), *GATE_ONLY_MODEL_TYPES)


PATCHES: tuple[PatchKind, ...] = (
    ModelFiles(FAMILIES),
    MultimodalWrappers(FAMILIES),
    OneFile(EagleProposerPatch()),
    Gate(gated_model_types()),
)
"""Every kind of change, in the support tables' order: the families' model files (and those of the families found
by rule), the multimodal wrappers found by rule, the proposer's fix, the gate (planned after the model files,
handed their verdicts).  The plan, the support tables and the tests read this list; a new kind of change is one
entry here (``patch_kinds.py``)."""


def planned_patches(found: Found, after_model_files: bool) -> tuple[Patch, ...]:
    """The patches of the entries planned first, or of those planned after the model files."""
    return tuple(t for kind in PATCHES if kind.after_model_files is after_model_files for t in kind.patches(found))


def every_patch(found: Found = Found()) -> tuple[Patch, ...]:
    """Every entry's patches; without ``found``, the catalog's own (none found by rule, the gate admitting the
    catalog's families)."""
    return tuple(t for kind in PATCHES for t in kind.patches(found))
