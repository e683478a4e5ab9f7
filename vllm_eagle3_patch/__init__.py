"""Give DeepSeek-V2/V3-family models EAGLE-3 support in an installed vLLM, reversibly."""

__version__ = "0.1.0"
