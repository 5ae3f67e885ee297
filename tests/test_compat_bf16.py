"""--bf16 (fairseq_posattn.compat.bf16): fairseq's argument parsing turns it
into --tpu; the repair keeps the device, keeps an explicit --tpu, and
fairseq-generate decodes in bfloat16.  On the CPU: the first update's loss in
bf16 is the float32 one within bf16's precision, and training stays finite."""

import math
from argparse import Namespace

import pytest
import torch
from conftest import TINY_MODEL_ARGS, USER_DIR, load_record, recorded_train_command, run, run_cli
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import BaseFairseqModel

import fairseq_posattn  # noqa: F401  (installs the repairs)
from fairseq_posattn.compat import bf16


def parsed(*flags):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["data", "--arch", "transformer", "--cpu", *flags])


def test_fairseq_implies_the_tpu_and_the_repair_keeps_the_device():
    assert bf16.implies_tpu()
    args = parsed("--bf16")
    assert args.tpu  # fairseq's parsing: --bf16 means a TPU
    cfg = convert_namespace_to_omegaconf(args)
    assert cfg.common.bf16 and not cfg.common.tpu
    assert convert_namespace_to_omegaconf(parsed("--memory-efficient-bf16")).common.tpu is False


def test_an_explicit_tpu_is_kept():
    cfg = convert_namespace_to_omegaconf(parsed("--bf16", "--tpu"))
    assert cfg.common.bf16 and cfg.common.tpu


def test_decoding_commands_cast_to_bfloat16_and_the_hub_keeps_float32():
    assert bf16.decoding_ignores_bf16()
    for path, dtype in (("checkpoint.pt", torch.bfloat16), (None, torch.float32)):
        model = BaseFairseqModel()
        model.linear = torch.nn.Linear(2, 2)
        cfg = Namespace(common=Namespace(bf16=True, fp16=False), common_eval=Namespace(path=path),
                        generation=Namespace(beam=1))
        model.prepare_for_inference_(cfg)
        assert model.linear.weight.dtype == dtype


def train_args(data, arch, save, *extra):
    return [data, "--user-dir", USER_DIR, "--task", "translation_struct", "--arch", arch,
            *TINY_MODEL_ARGS, "--encoder-recurrent-layers", "1" if "onlstm" in arch else "0",
            "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--seed", "1",
            "--save-dir", save, "--no-progress-bar", "--num-workers", "0", "--cpu",
            "--no-epoch-checkpoints", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["transformer_struct", "onlstm_san_transformer",
                                  "transformer_posattn_conv2d"])
def test_bf16_trains_on_the_cpu_like_float32_and_decodes(toy_struct_bin, tmp_path, arch):
    """fairseq-train with --user-dir (the plugin is imported while fairseq parses
    the command line) and --bf16: the first loss agrees with float32 to bf16's
    precision (8 bits of mantissa), later losses are finite; fairseq-generate --bf16."""
    steps = {}
    for name, precision in (("fp32", []), ("bf16", ["--bf16"])):
        record = tmp_path / f"{name}.pt"
        run(recorded_train_command(record, *train_args(
            toy_struct_bin, arch, tmp_path / name, "--max-update", "3", "--dropout", "0",
            *precision)))
        steps[name] = [loss / size for loss, size, _ in load_record(record)["steps"]]
    assert len(steps["bf16"]) == 3 and all(math.isfinite(loss) for loss in steps["bf16"])
    assert steps["bf16"][0] == pytest.approx(steps["fp32"][0], rel=2e-2)

    out = run_cli("fairseq-generate", toy_struct_bin, "--user-dir", USER_DIR,
                  "--task", "translation_struct", "--path", tmp_path / "bf16" / "checkpoint_last.pt",
                  "--gen-subset", "test", "--beam", "2", "--bf16", "--cpu", "--num-workers", "0")
    assert sum(line.startswith("H-") for line in out.stdout.splitlines()) == 10
