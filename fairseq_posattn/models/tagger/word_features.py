"""Word representations from characters and (optionally pretrained) word vectors.

:class:`CharacterCNN` follows Yu et al. (2017), *A General-Purpose Tagger with
Convolutional Neural Networks*: character embeddings, stacked convolutions
with ReLU, max-pooling over the word's characters.  Dufter et al. (2020,
Sec. 2.1) concatenate it to the word embedding (:class:`WordFeatures`).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import fail, quoted
from ...modules.pooling import masked_max


class CharacterCNN(nn.Module):
    """``[..., C]`` character ids -> ``[..., embed_dim]``, one vector per word.

    ``num_layers`` convolutions of width ``kernel_size`` (odd), "same" zero
    padding, ReLU; then the maximum over the word's characters.  Padding
    characters are zeroed before every convolution, as the convolution's own
    padding is, so a word's vector does not depend on how much padding its
    batch has; all-padding words (padding tokens) get zeros.
    """

    def __init__(self, num_chars: int, embed_dim: int, padding_idx: int,
                 num_layers: int = 3, kernel_size: int = 5):
        super().__init__()
        if kernel_size % 2 == 0 or num_layers < 1:
            raise ValueError(f"need an odd kernel size and at least one layer, "
                             f"got {kernel_size} and {num_layers}")
        self.padding_idx = padding_idx
        self.embed_dim = embed_dim
        self.embed = nn.Embedding(num_chars, embed_dim, padding_idx=padding_idx)
        self.convs = nn.ModuleList(
            nn.Conv1d(embed_dim, embed_dim, kernel_size, padding=kernel_size // 2)
            for _ in range(num_layers)
        )

    def forward(self, chars: Tensor) -> Tensor:
        """Each distinct word of the batch is encoded once, in groups of
        similar length cut to the group's width (exact: see the class doc)."""
        shape = chars.shape[:-1]
        words, inverse = torch.unique(chars.reshape(-1, chars.size(-1)), dim=0,
                                      return_inverse=True)
        lengths = words.ne(self.padding_idx).sum(dim=1)
        out = words.new_zeros(words.size(0), self.embed_dim, dtype=self.embed.weight.dtype)
        # width groups 1, 2, 4, 8, ...: a word of length n is cut to the next power of 2
        groups = torch.ceil(torch.log2(lengths.clamp(min=1).float())).long()
        for group in groups[lengths > 0].unique().tolist():
            members = (groups == group) & (lengths > 0)
            out[members] = self._encode(words[members, : 2**group]).to(out.dtype)
        return out[inverse].view(*shape, self.embed_dim)

    def _encode(self, chars: Tensor) -> Tensor:
        """``[N, C]`` words with at least one character -> ``[N, embed_dim]``."""
        real = chars.ne(self.padding_idx).unsqueeze(1)  # [N, 1, C]
        x = self.embed(chars).transpose(1, 2)  # [N, D, C]
        for conv in self.convs:
            x = F.relu(conv(x.masked_fill(~real, 0.0)))
        return masked_max(x.transpose(1, 2), ~real.squeeze(1))


class WordFeatures(nn.Module):
    """A word's embedding concatenated with its character-CNN vector.

    ``embedding_dim`` is the output width and ``padding_idx`` the word
    padding index, so the module can stand where an encoder expects its
    token embedding.
    """

    def __init__(self, words: nn.Embedding, chars: CharacterCNN):
        super().__init__()
        self.words = words
        self.chars = chars
        self.padding_idx = words.padding_idx
        self.embedding_dim = words.embedding_dim + chars.embed_dim

    def forward(self, src_tokens: Tensor, src_chars: Tensor) -> Tensor:
        return torch.cat([self.words(src_tokens), self.chars(src_chars)], dim=-1)


def read_vector_width(path: str) -> int:
    """The width of the vectors of a fastText text file (its header or first line)."""
    with open(path, encoding="utf-8", errors="strict") as f:
        fields = f.readline().rstrip().split(" ")
    if len(fields) == 2 and all(x.isdigit() for x in fields):
        return int(fields[1])
    return len(fields) - 1


def load_word_vectors(path: str, embedding: nn.Embedding, dictionary) -> int:
    """Copy the vectors of ``dictionary``'s words from a fastText text file
    (optional ``count width`` header, then ``word v_1 ... v_d`` per line) into
    ``embedding``; returns how many words were found.  Lines of other words
    are skipped unread; a malformed line of a needed word is an error naming
    the file and line."""
    width = embedding.embedding_dim
    found = 0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            word, _, rest = line.rstrip().partition(" ")
            if lineno == 1 and word.isdigit() and rest.isdigit():
                continue  # header
            index = dictionary.index(word)
            if index == dictionary.unk() or index < dictionary.nspecial:
                continue
            try:
                vector = [float(x) for x in rest.split(" ")]
            except ValueError:
                vector = None
            if vector is None or len(vector) != width or not all(map(math.isfinite, vector)):
                raise fail(
                    "the vector of %s is not %d finite numbers" % (quoted(word), width),
                    "fastText text format has one 'word v_1 ... v_%d' line per word, values "
                    "separated by single spaces; --word-embed-dim must be the vectors' width"
                    % width, source=path, line=lineno)
            with torch.no_grad():
                embedding.weight[index] = torch.tensor(vector, dtype=embedding.weight.dtype)
            found += 1
    return found
