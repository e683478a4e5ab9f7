"""``model_executor/models/gemma3_mm.py``: the Gemma 3 multimodal wrapper hands EAGLE-3 to its language model."""

from vllm_eagle3_patch.families import GEMMA3
from vllm_eagle3_patch.patches._decoder_eagle3 import WrapperTarget

TARGET = WrapperTarget(GEMMA3)
