"""``model_executor/models/gemma3.py``: Gemma 3 (text) becomes an EAGLE-3 target."""

from vllm_eagle3_patch.families import GEMMA3
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(GEMMA3)
