"""``model_executor/models/glm4_moe.py`` (0.10.0+): GLM-4.5/4.6 MoE becomes an EAGLE-3 target."""

from vllm_eagle3_patch.families import GLM4_MOE
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(GLM4_MOE)
