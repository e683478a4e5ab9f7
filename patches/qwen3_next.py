"""``model_executor/models/qwen3_next.py`` (0.10.2+): Qwen3-Next becomes an EAGLE-3 target."""

from vllm_eagle3_patch.families import QWEN3_NEXT
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(QWEN3_NEXT)
