"""Tiny random-weight Qwen-VL checkpoints built locally (no downloads) for tests, demos and CI.

``build_tiny_model(family, out, seed)`` writes a folder that ``AutoProcessor``,
``AutoModelForImageTextToText`` and vLLM load offline, exactly like a real checkpoint of the family.
"""

from services.common.tiny_models.builder import build_tiny_model

__all__ = ["build_tiny_model"]
