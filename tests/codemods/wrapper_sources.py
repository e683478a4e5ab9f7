"""A synthetic multimodal wrapper for the decoder and wrapper codemods' tests (no vLLM code here)."""

WRAPPER_SOURCE = """\
from .interfaces import SupportsMultiModal


class ToyForConditionalGeneration(nn.Module, SupportsMultiModal):

    def __init__(self, vllm_config):
        self.language_model = init_vllm_registered_model(vllm_config)
"""
