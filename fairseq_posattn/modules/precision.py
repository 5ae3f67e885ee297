"""Half-precision safety: what must run in float32 does, whatever the model's dtype."""

import torch
from torch import Tensor


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` in float32 if it is half or bfloat16; float32/float64 unchanged."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
