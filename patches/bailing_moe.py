"""``model_executor/models/bailing_moe.py`` (0.10.0+): Ling / Bailing MoE (and its V2 subclass) become EAGLE-3 targets."""

from vllm_eagle3_patch.families import BAILING_MOE
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(BAILING_MOE)
