"""What a recipe needs to know about an architecture, from fairseq's own
registries (so it holds for any ``--arch`` and extra flags)::

    fairseq-posattn-arch-plan --arch transformer_struct_big [FLAGS...]

prints ``KEY=value`` lines:

* ``TASK``: ``translation_struct`` when the encoder reads dependency trees
  (structural positions, Wang et al. 2019), else ``translation``;
* ``SIZE``: ``big`` for a 1024-wide model (Vaswani et al. 2017's big), else ``base``;
* ``GPUS``: CUDA devices torch sees on this machine.
"""

import argparse
from typing import Dict, Sequence

import torch
from fairseq.models import ARCH_MODEL_NAME_REGISTRY

from ..models.from_flags import parse_model_flags
from ..modules.options import PositionAttentionConfig


def plan(arch: str, extra: Sequence[str] = ()) -> Dict[str, str]:
    args = parse_model_flags(["--arch", arch, *extra])
    trees = (ARCH_MODEL_NAME_REGISTRY[arch] == "transformer_posattn"
             and PositionAttentionConfig.from_namespace(args).uses_structure())
    return {
        "TASK": "translation_struct" if trees else "translation",
        "SIZE": "big" if args.encoder_embed_dim >= 1024 else "base",
        "GPUS": str(torch.cuda.device_count()),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="fairseq-posattn-arch-plan",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", required=True)
    args, extra = p.parse_known_args(argv)
    for key, value in plan(args.arch, extra).items():
        print("%s=%s" % (key, value))


if __name__ == "__main__":
    main()
