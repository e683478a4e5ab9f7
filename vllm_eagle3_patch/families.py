"""The model families this tool makes EAGLE-3 targets, as data.

A family is a vLLM model file whose decoder-only model has the usual pipeline-parallel
loop (``self.layers`` from ``self.start_layer`` to ``self.end_layer``, each layer returning
``hidden_states, residual``) and a causal-LM class holding that model in ``self.model``.
``patches/_decoder_eagle3.py`` turns a :class:`Family` into a codemod and a target; each
family's module in ``patches/`` is one line instantiating it.  The speculative-config gate
takes the families' model types from here, so adding a family is adding data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Wrapper:
    """A multimodal class whose language model is the family's causal LM."""

    path: str
    """Relative to ``vllm/``."""
    cls: str
    language_model: str = "self.language_model"
    """The attribute holding the causal LM (an instance of the family's ``causal_lm``)."""


@dataclass(frozen=True)
class Family:
    name: str
    path: str
    """The model file, relative to ``vllm/``."""
    model: str
    """The decoder class whose ``forward`` loops over the layers (e.g. ``Gemma3Model``)."""
    causal_lm: str
    """The class vLLM's runner holds (it and its subclasses gain ``SupportsEagle3``)."""
    model_types: tuple[str, ...]
    """``hf_text_config.model_type`` values the speculative-config gate must accept."""
    decoder: str = "self.model"
    """Where ``causal_lm`` keeps its ``model`` instance."""
    wrapper: Optional[Wrapper] = None
    ids_on_the_class: bool = False
    """Also declare the empty ids on the model class, for subclasses in other files that run
    its ``forward`` but skip its ``__init__`` (Qwen3.5's model and Qwen3-Next's)."""
    required: bool = False
    """A vLLM whose file cannot be patched is refused as a whole (DeepSeek, the tool's first
    purpose); otherwise the file is left alone and the other targets are still patched."""
    forward_from: Optional["Family"] = None
    """The family whose model's ``forward`` this family's model inherits (Qwen3.5's runs
    Qwen3-Next's): here only the model's ``__init__`` and the causal LM are patched, and only
    where that family's file is patchable too."""


MODELS = "model_executor/models"

DEEPSEEK_V2 = Family(
    "DeepSeek-V2/V3",
    f"{MODELS}/deepseek_v2.py",
    "DeepseekV2Model",
    "DeepseekV2ForCausalLM",  # V3, V3.2 and Kimi-K2 are subclasses or the same class
    ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"),
    required=True,
)

GLM4_MOE = Family("GLM-4.5 MoE", f"{MODELS}/glm4_moe.py", "Glm4MoeModel", "Glm4MoeForCausalLM", ("glm4_moe",))
GEMMA3 = Family(
    "Gemma 3",
    f"{MODELS}/gemma3.py",
    "Gemma3Model",
    "Gemma3ForCausalLM",
    ("gemma3", "gemma3_text"),
    wrapper=Wrapper(f"{MODELS}/gemma3_mm.py", "Gemma3ForConditionalGeneration"),
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
    (),  # the gate already accepts it: "qwen" is matched as a substring
    ids_on_the_class=True,  # qwen3_5.py's Qwen3_5Model (0.17.x) skips Qwen3NextModel.__init__
)

QWEN3_5 = Family(
    "Qwen3.5",
    f"{MODELS}/qwen3_5.py",
    "Qwen3_5Model",
    "Qwen3_5ForCausalLMBase",  # the text-only Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM; the
    # multimodal classes inherit Qwen3-VL's EAGLE-3 methods, which reach the same model
    (),  # accepted as "qwen", like Qwen3-Next
    forward_from=QWEN3_NEXT,
)

FAMILIES = (DEEPSEEK_V2, GLM4_MOE, GEMMA3, BAILING_MOE, MINIMAX_M2, LONGCAT_FLASH, QWEN3_NEXT, QWEN3_5)

GATE_ONLY_MODEL_TYPES = ("phi3",)
"""Families whose model already implements EAGLE-3 (Phi-3 and Phi-4-mini inherit it from
``LlamaForCausalLM``) and are kept out only by the speculative-config gate."""


def gated_model_types() -> tuple[str, ...]:
    """Every family model type the speculative-config gate must accept, in family order."""
    return (*(t for family in FAMILIES for t in family.model_types), *GATE_ONLY_MODEL_TYPES)
