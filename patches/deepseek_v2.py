"""``model_executor/models/deepseek_v2.py``: DeepSeek-V2/V3 (Kimi-K2 too) become EAGLE-3 targets.

``DeepseekV2Model.forward`` collects the residual stream at the requested global layer
ids, and ``DeepseekV2ForCausalLM`` (so every subclass: V3, V3.2, Kimi-K2, ...) gains the
``SupportsEagle3`` protocol and its two methods, as upstream did in vLLM 0.18.0 and with
its two gaps closed: id 0 on the first rank (no residual yet) and id ``n`` (the output of
the last layer) both work.  The codemod is the families' (``_decoder_eagle3.py``).
"""

from vllm_eagle3_patch.families import DEEPSEEK_V2
from vllm_eagle3_patch.patches._decoder_eagle3 import DecoderTarget

TARGET = DecoderTarget(DEEPSEEK_V2)
