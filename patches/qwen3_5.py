"""``model_executor/models/qwen3_5.py`` (0.17.x): Qwen3.5's text-only causal LMs become EAGLE-3 targets."""

from vllm_eagle3_patch.families import QWEN3_5
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(QWEN3_5)
