"""``model_executor/models/longcat_flash.py`` (0.11.0+): LongCat-Flash becomes an EAGLE-3 target."""

from vllm_eagle3_patch.families import LONGCAT_FLASH
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(LONGCAT_FLASH)
