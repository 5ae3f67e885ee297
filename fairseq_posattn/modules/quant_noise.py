"""fairseq's quant noise (Fan, Stock et al. 2020, "Training with Quantization
Noise for Extreme Model Compression") on weights that are not an ``nn.Linear``.

:func:`fairseq.modules.quant_noise.quant_noise` takes ``nn.Linear``,
``nn.Embedding`` and ``nn.Conv2d`` modules only; :func:`quant_noise_on` applies
its noise to any named weights of a module whose input features lie on axis 1
(a Linear's ``[out, in]``, the ON-LSTM's ``[D, in, G]``): in training, before
each forward, every block of ``block_size`` consecutive input features of an
output unit is zeroed with probability ``p`` and the rest scaled by
``1 / (1 - p)``.  The mask is fairseq's, drawn in the same order.  As
fairseq's hook does, the result is written into the weights themselves, so a
dropped block stays zero (fairseq issue #3783); it is written in place, which
keeps ``nn.LSTM``'s flattened cuDNN weights one block of memory.
"""

from typing import Sequence

import torch
from torch import Tensor, nn


def block_mask(weight: Tensor, p: float, block_size: int) -> Tensor:
    """True on the dropped blocks: ``block_size`` consecutive input features
    (axis 1) of one output unit, each block dropped with probability ``p``."""
    shape = list(weight.shape)
    shape[1] //= block_size
    mask = torch.zeros(shape, device=weight.device).bernoulli_(p)
    return mask.repeat_interleave(block_size, dim=1).bool()


def quant_noise_on(module: nn.Module, names: Sequence[str], p: float, block_size: int) -> nn.Module:
    """Register fairseq's quant-noise forward pre-hook on ``module`` for its
    parameters ``names``; no hook when ``p`` is 0."""
    if p <= 0:
        return module
    for name in names:
        width = module.get_parameter(name).size(1)
        if width % block_size:
            raise ValueError(f"{name} has {width} input features, not a multiple of the "
                             f"quant-noise block size {block_size}")
    scale = 1 / (1 - p)

    def drop_blocks(mod, inputs):
        if mod.training:
            for name in names:
                weight = mod.get_parameter(name).data
                weight.masked_fill_(block_mask(weight, p, block_size), 0).mul_(scale)

    module.register_forward_pre_hook(drop_blocks)
    return module
