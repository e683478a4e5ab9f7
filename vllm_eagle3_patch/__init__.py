"""EAGLE-3 speculative decoding for more model families in an installed vLLM, patched in place, reversibly."""

__version__ = "0.1.0"
PROG = "vllm-eagle3-patch"
