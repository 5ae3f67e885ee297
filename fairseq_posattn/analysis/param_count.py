"""Parameter count of any architecture, split into embeddings / encoder / decoder.

    fairseq-posattn-param-count --arch transformer --vocab 32000 --share-all-embeddings

Every other argument is a fairseq-train argument; the model is built through
fairseq's own argument parsing with dictionaries of the given sizes.
Embeddings are the token embeddings and the decoder's output projection
(shared tensors counted once); encoder and decoder are everything else.
"""

import argparse
from typing import Optional, Sequence

from ..models.from_flags import build_model_from_flags

EMBEDDING_PARTS = ("embed_tokens", "output_projection")


def count(model) -> dict:
    """Unique parameters of each part (a tensor shared by two parts counts in the first)."""
    parts = {"embeddings": 0, "encoder": 0, "decoder": 0}
    for name, param in model.named_parameters():  # a shared tensor once, under its first name
        embedding = any(part in name for part in EMBEDDING_PARTS)
        parts["embeddings" if embedding else name.split(".", 1)[0]] += param.numel()
    parts["total"] = sum(parts.values())
    return parts


def main(argv=None) -> dict:
    own = argparse.ArgumentParser(prog="fairseq-posattn-param-count",
                                  description=__doc__.split("\n\n")[0],
                                  epilog="Every other argument is a fairseq-train argument "
                                         "(--arch ARCH, --encoder-layers N, ...).")
    own.add_argument("--vocab", type=int, required=True, help="source vocabulary size")
    own.add_argument("--target-vocab", type=int, default=None,
                     help="target vocabulary size (default: --vocab; one joined dictionary)")
    settings, fairseq_args = own.parse_known_args(argv)
    args, model = build_model_from_flags(fairseq_args, settings.vocab, settings.target_vocab)
    parts = count(model)
    print(f"{args.arch} (vocabulary {settings.vocab}"
          + (f"/{settings.target_vocab}" if settings.target_vocab else "") + ")")
    for part, n in parts.items():
        print(f"  {part:<11} {n:>13,}  ({n / 1e6:.2f}M)")
    return parts


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """The console script: :func:`main` without its return value."""
    main(argv)


if __name__ == "__main__":
    cli_main()
