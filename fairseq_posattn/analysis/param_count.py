"""Parameter count of any architecture, split into embeddings / encoder / decoder.

    python scripts/param_count.py --arch onlstm_san_transformer --vocab 40000
    python scripts/param_count.py --arch transformer --vocab 32000 --share-all-embeddings
    python scripts/param_count.py --arch transformer_struct --vocab 32000 --target-vocab 30000

Every argument after ``--vocab``/``--target-vocab`` is a fairseq-train
argument (``--encoder-layers 4``, ``--share-decoder-input-output-embed``, ...);
the model is built through fairseq's own argument parsing with dictionaries
of the given sizes, so the figures are those of a real training run.
Embeddings are the token embeddings and the decoder's output projection
(shared tensors counted once); encoder and decoder are everything else.
"""

import argparse
import sys
import types

from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_posattn  # noqa: F401  (registers the plugin's archs)

EMBEDDING_PARTS = ("embed_tokens", "output_projection")


def dictionary(size: int) -> Dictionary:
    vocab = Dictionary()
    for i in range(size - vocab.nspecial):
        vocab.add_symbol(f"w{i}")
    return vocab


def count(model) -> dict:
    """Unique parameters of each part (a tensor shared by two parts counts in the first)."""
    seen, parts = set(), {"embeddings": 0, "encoder": 0, "decoder": 0}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            continue
        seen.add(id(param))
        if any(part in name for part in EMBEDDING_PARTS):
            parts["embeddings"] += param.numel()
        else:
            parts[name.split(".", 1)[0]] += param.numel()
    parts["total"] = sum(parts.values())
    return parts


def main(argv=None) -> dict:
    own = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    own.add_argument("--vocab", type=int, required=True, help="source vocabulary size")
    own.add_argument("--target-vocab", type=int, default=None,
                     help="target vocabulary size (default: --vocab; one joined dictionary)")
    settings, fairseq_args = own.parse_known_args(argv)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["unused-data-dir", "--task", "translation",
                                                *fairseq_args])
    source = dictionary(settings.vocab)
    target = source if settings.target_vocab is None else dictionary(settings.target_vocab)
    task = types.SimpleNamespace(source_dictionary=source, target_dictionary=target)
    model = ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)
    parts = count(model)
    print(f"{args.arch} (vocabulary {settings.vocab}"
          + (f"/{settings.target_vocab}" if settings.target_vocab else "") + ")")
    for part, n in parts.items():
        print(f"  {part:<11} {n:>13,}  ({n / 1e6:.2f}M)")
    return parts


if __name__ == "__main__":
    main(sys.argv[1:])
