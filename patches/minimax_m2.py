"""``model_executor/models/minimax_m2.py`` (0.11.1+): MiniMax-M2 becomes an EAGLE-3 target."""

from vllm_eagle3_patch.families import MINIMAX_M2
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(MINIMAX_M2)
