"""Attention layers and the position terms they compose (no registration here)."""

from .attention import PositionAwareSelfAttention
from .options import PositionAttentionConfig
from .attention_context import AttentionContext
from .encoder_layer import PositionAwareEncoderLayer

__all__ = [
    "AttentionContext",
    "PositionAttentionConfig",
    "PositionAwareEncoderLayer",
    "PositionAwareSelfAttention",
]
