"""``--bf16`` on GPUs and CPUs, as fairseq's help promises for TPUs only.

fairseq 0.12's ``parse_args_and_arch`` (and fairseq-fixed 0.12.3.1's) turns
``--tpu`` on for ``--bf16`` or ``--memory-efficient-bf16``, so such a command
stops in ``get_tpu_device`` without ``torch_xla``, although the trainer handles
bf16 on any device.  :func:`install` wraps ``override_module_args`` (the first
step of ``convert_namespace_to_omegaconf``, which every command runs): a
namespace with ``bf16`` and ``tpu`` whose command line did not ask for
``--tpu`` gets ``tpu`` off.  Hydra configs keep what they say.

fairseq-generate and fairseq-interactive cast the models for ``--fp16`` but
ignore ``--bf16``: ``prepare_for_inference_`` casts them to bfloat16 when a
decoding command (its config names checkpoints, ``common_eval.path``) asked for
``--bf16``; the hub keeps float32, as it does for fp16-trained models.
"""

import functools
import logging
import sys
from typing import Optional, Sequence

from .patching import wrap_once

logger = logging.getLogger(__name__)

# The arguments of the command line being parsed (None: sys.argv[1:]), recorded
# by the wrapped parse_args_and_arch or found in the parse that imports the plugin.
_parsed_args: dict = {}


def asked_for_tpu(input_args: Optional[Sequence[str]]) -> bool:
    args = sys.argv[1:] if input_args is None else input_args
    return any(str(a) == "--tpu" or str(a).startswith("--tpu=") for a in args)


def _record_parse_in_progress(parse_args_and_arch) -> None:
    """The plugin is often imported by ``--user-dir`` from inside
    ``parse_args_and_arch``: record that call's arguments."""
    code = getattr(parse_args_and_arch, "__wrapped__", parse_args_and_arch).__code__
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is code:
            _parsed_args["input_args"] = frame.f_locals.get("input_args")
            return
        frame = frame.f_back


def _keep_device(override_module_args):
    @functools.wraps(override_module_args)
    def wrapper(args):
        if (
            args is not None
            and getattr(args, "bf16", False)
            and getattr(args, "tpu", False)
            and "input_args" in _parsed_args
            and not asked_for_tpu(_parsed_args["input_args"])
        ):
            logger.info("--bf16 without --tpu: training on %s, not on a TPU (fairseq 0.12 "
                        "implies --tpu; pass it explicitly for a TPU)",
                        "the CPU" if getattr(args, "cpu", False) else "this machine's device")
            args.tpu = False
        return override_module_args(args)

    return wrapper


def _recording(parse_args_and_arch):
    @functools.wraps(parse_args_and_arch)
    def wrapper(parser, input_args=None, *args, **kwargs):
        _parsed_args["input_args"] = input_args
        return parse_args_and_arch(parser, input_args, *args, **kwargs)

    return wrapper


def _casting(prepare_for_inference_):
    @functools.wraps(prepare_for_inference_)
    def wrapper(self, cfg):
        prepare_for_inference_(self, cfg)
        common = getattr(cfg, "common", None)
        decoding = getattr(getattr(cfg, "common_eval", None), "path", None) is not None
        if decoding and getattr(common, "bf16", False) and not getattr(common, "fp16", False):
            self.bfloat16()

    return wrapper


def _source(module_name: str) -> str:
    import importlib.util

    with open(importlib.util.find_spec(module_name).origin, encoding="utf-8") as f:
        return f.read()


def implies_tpu() -> bool:
    """True if fairseq's argument parsing turns ``--tpu`` on for ``--bf16``."""
    return "args.tpu = True" in _source("fairseq.options")


def decoding_ignores_bf16() -> bool:
    """True if ``fairseq-generate`` casts its models for ``--fp16`` only."""
    return "bf16" not in _source("fairseq_cli.generate")


def install() -> None:
    """Keep the device for ``--bf16`` where fairseq implies the TPU, and decode
    in bfloat16 where fairseq-generate ignores ``--bf16``; idempotent."""
    from fairseq import options
    from fairseq.dataclass import utils as dataclass_utils
    from fairseq.models import BaseFairseqModel

    if implies_tpu():
        _record_parse_in_progress(options.parse_args_and_arch)
        wrap_once(options, "parse_args_and_arch", _recording)
        wrap_once(dataclass_utils, "override_module_args", _keep_device)
    if decoding_ignores_bf16():
        wrap_once(BaseFairseqModel, "prepare_for_inference_", _casting)
