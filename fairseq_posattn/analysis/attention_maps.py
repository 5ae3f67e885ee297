"""The attention probabilities of an encoder's self-attention layers
(docs/plots.md), recorded with forward hooks while every layer's
``expose_weights`` is set.  The encoder right-pads internally, so in every map
``[b, :, :n, :n]`` is the block of sentence ``b`` of ``n`` tokens (EOS
included), whatever fairseq's padding side.
"""

from contextlib import contextmanager
from typing import Iterator, List, Optional

import torch
from torch import Tensor, nn

from ..modules.attention import PositionAwareSelfAttention
from .source import CheckpointEncoder, SourceSentence


@contextmanager
def recorded_attention(encoder: nn.Module) -> Iterator[List[Optional[Tensor]]]:
    """Within the block, every forward pass of ``encoder`` stores the
    ``[B, H, T, T]`` probabilities of its i-th self-attention layer at index i
    of the yielded list (the last pass's)."""
    layers = [m for m in encoder.modules() if isinstance(m, PositionAwareSelfAttention)]
    if not layers:
        raise ValueError(
            f"{type(encoder).__name__} has no position-aware self-attention layer; "
            f"attention maps need a fairseq_posattn architecture"
        )
    maps: List[Optional[Tensor]] = [None] * len(layers)

    def keeper(index):
        def hook(module, inputs, output):
            maps[index] = output[1].detach()

        return hook

    handles = [layer.register_forward_hook(keeper(i)) for i, layer in enumerate(layers)]
    before = [layer.expose_weights for layer in layers]
    for layer in layers:
        layer.expose_weights = True
    try:
        yield maps
    finally:
        for handle, layer, value in zip(handles, layers, before):
            handle.remove()
            layer.expose_weights = value


def sentence_attention(runner: CheckpointEncoder, sentence: SourceSentence) -> Tensor:
    """``[layers, heads, n, n]`` float32 maps of one sentence of ``n`` tokens
    (its pieces and EOS, in order); row = query, column = key."""
    with recorded_attention(runner.encoder) as maps:
        runner.run([sentence])
    n = len(sentence.tokens)
    return torch.stack([m[0, :, :n, :n] for m in maps]).float().cpu()
