"""End to end through fairseq's command-line tools with the plugin loaded.

For every architecture in RUNS: fairseq-train (a tiny model, a few updates),
fairseq-generate on the test split and fairseq-interactive on raw input, each
with ``--user-dir``.  One architecture of each family (FRESH_PROCESS) runs the
console scripts as subprocesses, where ``--user-dir`` alone loads the plugin;
the others run the same entry points (``cli_main``) in this process: the
plugin registers every architecture at once, so what differs between them is
the model, which runs the same in either process.
"""

import re

import pytest
import torch

from conftest import COMMON_ARGS, TOY_SIZES, USER_DIR, run_cli, run_cli_in_process, tiny_training

from fairseq_posattn.models.transformer_posattn import DUFTER_ROWS

pytestmark = pytest.mark.slow  # command lines, recipes, training

# (arch, extra fairseq-train arguments): fairseq's own transformer, every
# plugin arch, and the relative-position options that no named arch selects.
TABLE_BOUND = ("--max-source-positions", "256")
RUNS = {
    "transformer": ("transformer", ()),
    "transformer_posattn": ("transformer_posattn", TABLE_BOUND),
    **{arch: (arch, TABLE_BOUND) for arch in DUFTER_ROWS},
    "shaw+bilan+conv2d+temp": (
        "transformer_posattn",
        TABLE_BOUND + ("--relative-positions", "--max-relative-position", "4",
                       "--query-relative-positions", "--convolved-attention", "2d",
                       "--learnable-temperature"),
    ),
    "pe-concat": ("transformer_posattn", ("--encoder-position-embedding", "concat")),
    # the position methods that read no trees (test_translation_struct.py runs the others)
    **{arch: (arch, ()) for arch in ("transformer_rope", "transformer_alibi", "transformer_t5bias")},
    # Hao et al. (2019): the hybrid, the reverse stack order, a pure LSTM encoder
    "onlstm_san_transformer": ("onlstm_san_transformer", ("--encoder-recurrent-layers", "1")),
    "transformer_san3_onlstm3": ("transformer_san3_onlstm3", ("--encoder-recurrent-layers", "1")),
    "transformer_lstm6": ("transformer_lstm6", ("--encoder-recurrent-layers", "1",
                                                "--encoder-layers", "0")),
}

# fairseq's own model, the position-aware one with most options, the hybrid
FRESH_PROCESS = {"transformer", "shaw+bilan+conv2d+temp", "onlstm_san_transformer"}

RAW_INPUT = "the dog sleeps .\nthe old teacher reads a book because the cat laughs .\n"


def hypothesis_ids(stdout: str):
    return sorted(int(m.group(1)) for m in re.finditer(r"^H-(\d+)\t", stdout, re.M))


@pytest.mark.parametrize("run", sorted(RUNS))
def test_train_generate_interactive(run, toy_data_bin, tmp_path):
    arch, extra = RUNS[run]

    def command(name, *args, input=""):
        if run in FRESH_PROCESS:
            return run_cli(name, *args, input=input).stdout
        return run_cli_in_process(name, *args, input=input)

    save_dir = tmp_path / "ckpt"
    command("fairseq-train", *tiny_training(toy_data_bin, save_dir, arch=arch, max_update=4, extra=extra))
    ckpt = save_dir / "checkpoint_last.pt"
    assert ckpt.exists() and (save_dir / "checkpoint_best.pt").exists()
    state = torch.load(str(ckpt), map_location="cpu")
    assert state["optimizer_history"][-1]["num_updates"] == 4

    # everything the checkpoint pickles is on the plugin's allow-list
    if hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint"):
        from fairseq_posattn.compat.safe_loading import fairseq_checkpoint_globals

        allowed = {name for _, name in fairseq_checkpoint_globals()}
        unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt)))
        assert unsafe <= allowed, unsafe - allowed

    generated = command(
        "fairseq-generate", toy_data_bin, "--user-dir", USER_DIR,
        "--path", ckpt, "--gen-subset", "test", "--beam", "2", "--max-len-b", "10",
        "--batch-size", "4", *COMMON_ARGS,
    )
    assert hypothesis_ids(generated) == list(range(TOY_SIZES["test"]))
    assert "BLEU" in generated

    interactive = command(
        "fairseq-interactive", toy_data_bin, "--user-dir", USER_DIR,
        "--path", ckpt, "--source-lang", "en", "--target-lang", "de",
        "--beam", "2", "--max-len-b", "10", "--cpu",
        input=RAW_INPUT,
    )
    assert hypothesis_ids(interactive) == [0, 1]
    sources = re.findall(r"^S-\d+\t(.*)$", interactive, re.M)
    assert sources == RAW_INPUT.splitlines()
