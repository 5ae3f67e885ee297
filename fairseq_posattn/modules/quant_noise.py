"""fairseq's quant noise (Fan, Stock et al. 2020) on weights that are not an
``nn.Linear``, ``nn.Embedding`` or ``nn.Conv2d`` (all that
:func:`fairseq.modules.quant_noise.quant_noise` takes): any named weights
whose input features lie on axis 1 (the ON-LSTM's ``[D, in, G]``).  The mask
is fairseq's, drawn in the same order, and as in fairseq's hook it is written
into the weights themselves, so a dropped block stays zero (fairseq issue
#3783); in place, which keeps ``nn.LSTM``'s flattened cuDNN weights one block
of memory.
"""

from typing import Sequence, Tuple

import torch
from torch import Tensor, nn


def block_mask(weight: Tensor, p: float, block_size: int) -> Tensor:
    """True on the dropped blocks: ``block_size`` consecutive input features
    (axis 1) of one output unit, each block dropped with probability ``p``."""
    shape = list(weight.shape)
    shape[1] //= block_size
    mask = torch.zeros(shape, device=weight.device).bernoulli_(p)
    return mask.repeat_interleave(block_size, dim=1).bool()


def check_block_size(block_size: int, weights: Sequence[Tuple[str, int]]) -> None:
    """Refuse a ``--quant-noise-pq-block-size`` (0: quant noise off) that does not
    divide the input features of ``weights``, ``(what, width)`` pairs."""
    for what, width in weights:
        if block_size and width % block_size:
            raise ValueError(f"--quant-noise-pq-block-size {block_size} does not divide the {width} input features "
                             f"of the {what}: fairseq's quant noise drops blocks of that many input features")


def quant_noise_on(module: nn.Module, names: Sequence[str], p: float, block_size: int) -> nn.Module:
    """Register fairseq's quant-noise forward pre-hook on ``module`` for its
    parameters ``names`` (none when ``p`` is 0): in training, before each
    forward, each :func:`block_mask` block is zeroed with probability ``p``
    and the rest scaled by ``1 / (1 - p)``."""
    if p <= 0:
        return module
    check_block_size(block_size, [(name, module.get_parameter(name).size(1)) for name in names])
    scale = 1 / (1 - p)

    def drop_blocks(mod, inputs):
        if mod.training:
            for name in names:
                weight = mod.get_parameter(name).data
                weight.masked_fill_(block_mask(weight, p, block_size), 0).mul_(scale)

    module.register_forward_pre_hook(drop_blocks)
    return module
