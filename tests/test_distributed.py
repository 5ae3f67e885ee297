"""Data-parallel training: two fairseq-train processes on CPU (gloo, processes
launched by hand) against one process with the doubled batch, for every
family of encoders; and no parameter left without a gradient by any option.

How the comparison is made exact in the data it sees: fairseq sorts the
sentences by length and cuts them into batches of ``--max-sentences``
(``--required-batch-size-multiple 1``: nothing rounded), then shuffles the
list of batches with the seed of the epoch and gives rank r the batches
r, r + N, r + 2N, ... of that list.  ``--grouped-shuffling`` shuffles groups
of N consecutive batches instead, so the N batches of an update are always N
neighbours of the sorted list: exactly the sentences of one batch N times as
large.  With as many groups as the single process has batches (60 sentences:
12 batches of 5 in 6 groups, 6 batches of 10) both shuffles draw the same
permutation, so update k of the 2-process run trains on the same 10
sentences as update k of the single process.  Dropout 0
and plain SGD (Adam would blow float rounding in near-zero gradients up to
whole steps of the learning rate) leave only float rounding between the two.
"""

import json
import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from fairseq import checkpoint_utils

from conftest import (COMMON_ARGS, USER_DIR, cli, free_port, load_record, recorded_train_command,
                      run, subprocess_env)

from fairseq_posattn.compat import distributed_launch

pytestmark = pytest.mark.slow  # command lines, recipes, training

TINY = [
    "--encoder-layers", "2", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]
BATCH = 5  # per process; the single process takes 2 * BATCH
UPDATES = 3

# one row per family of encoders: (task, arch, extra flags)
ROWS = {
    # P + R (first layer), Shaw, Bilan & Roth, temperature and conv1d in one model
    "posattn-every-option": ("translation", "transformer_posattn", [
        "--position-interactions", "PR", "--relative-positions", "--max-relative-position", "4",
        "--query-relative-positions", "--learnable-temperature", "--convolved-attention", "1d",
        "--max-source-positions", "64", "--interaction-max-len", "64"]),
    "struct": ("translation_struct", "transformer_struct", []),
    "onlstm-san": ("translation", "onlstm_san_transformer",
                   ["--encoder-recurrent-layers", "1", "--encoder-layers", "1"]),
    "pure-lstm": ("translation", "transformer_lstm6",
                  ["--encoder-recurrent-layers", "2", "--encoder-layers", "0"]),
}


def train_args(data, task, arch, extra, batch, save=("--no-save",)):
    return [
        data, "--user-dir", USER_DIR, "--task", task, "--arch", arch, *TINY, *extra,
        "--dropout", "0", "--optimizer", "sgd", "--lr", "0.5",
        "--max-sentences", str(batch), "--required-batch-size-multiple", "1",
        "--grouped-shuffling", "--max-update", str(UPDATES), "--seed", "3",
        *save, "--disable-validation", "--no-progress-bar", *COMMON_ARGS,
    ]


def rank_flags(rank, port):
    """The documented launch's flags for rank ``rank`` of two, each started by hand."""
    return ["--ddp-backend", "legacy_ddp", "--distributed-backend", "gloo",
            "--distributed-world-size", "2", "--distributed-no-spawn",
            "--distributed-init-method", "tcp://127.0.0.1:%d" % port,
            "--distributed-rank", str(rank), "--device-id", str(rank)]


def hand_launched(train, rank, port):
    return [cli("fairseq-train"), *train, *rank_flags(rank, port)]


def run_together(commands):
    """Run the commands at the same time; their outputs, after all succeeded."""
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=subprocess_env()) for command in commands]
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for command, p, out in zip(commands, procs, outputs):
        assert p.returncode == 0, "%s failed:\n%s" % (command[3], out[-4000:])
    return outputs


@pytest.mark.parametrize("row", sorted(ROWS))
def test_two_processes_equal_one_with_the_doubled_batch(row, toy_struct_bin, tmp_path):
    task, arch, extra = ROWS[row]
    records = [tmp_path / "rank0.pt", tmp_path / "rank1.pt"]
    single_record = tmp_path / "single.pt"
    port = free_port()
    ranks = [
        recorded_train_command(
            record, *train_args(toy_struct_bin, task, arch, extra, BATCH), *rank_flags(rank, port))
        for rank, record in enumerate(records)
    ]
    single = recorded_train_command(single_record,
                                    *train_args(toy_struct_bin, task, arch, extra, 2 * BATCH))
    outputs = run_together([*ranks, single])
    assert "distributed init (rank 1)" in "".join(outputs[:2])
    ranks = [load_record(r) for r in records]
    single = load_record(single_record)

    # same start, and both ranks end bit-identical (gradients are all-reduced)
    for name, value in single["initial"].items():
        assert torch.equal(ranks[0]["initial"][name], value), name
    for name, value in ranks[0]["final"].items():
        assert torch.equal(ranks[1]["final"][name], value), name

    # every update: the two ranks' sentences are the doubled batch's, the loss is its loss
    assert len(single["steps"]) == len(ranks[0]["steps"]) == len(ranks[1]["steps"]) == UPDATES
    for (loss0, size0, ids0), (loss1, size1, ids1), (loss, size, ids) in zip(
            ranks[0]["steps"], ranks[1]["steps"], single["steps"]):
        assert len(ids0) == len(ids1) == BATCH
        assert sorted(ids0 + ids1) == sorted(ids)
        assert size0 + size1 == size
        assert (loss0 + loss1) / size == pytest.approx(loss / size, rel=1e-5)

    # the same parameters up to float rounding, after they really moved
    moved = max((single["final"][k] - single["initial"][k]).abs().max().item()
                for k in single["final"] if single["final"][k].is_floating_point())
    assert moved > 1e-2
    for name, value in single["final"].items():
        torch.testing.assert_close(ranks[0]["final"][name], value, atol=1e-5, rtol=1e-4,
                                   msg=name)


def logged_losses(output):
    """The loss of every update that rank 0 logged (``--log-format json --log-interval 1``)."""
    return [float(json.loads(line.split("| train_inner | ", 1)[1])["loss"])
            for line in output.splitlines() if "| train_inner | " in line]


def test_torchrun_trains_as_the_hand_launched_ranks(toy_struct_bin, tmp_path):
    """torchrun sets WORLD_SIZE; fairseq read it only with a world size other than
    its default (the GPU count, at least 1), so on CPUs each process trained alone."""
    def train(save_dir):
        return train_args(toy_struct_bin, "translation", "transformer_posattn", [], BATCH,
                          save=["--save-dir", save_dir, "--no-epoch-checkpoints", "--log-format",
                                "json", "--log-interval", "1"])

    port = free_port()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                cli("fairseq-train"), *train(tmp_path / "torchrun"),
                "--ddp-backend", "legacy_ddp", "--distributed-backend", "gloo"]
    launched, rank0, _ = run_together(
        [torchrun, *(hand_launched(train(tmp_path / "by-hand"), rank, port) for rank in (0, 1))])
    assert "training on 2 devices" in launched and "WORLD_SIZE=2" in launched
    assert len(logged_losses(rank0)) == UPDATES
    assert logged_losses(launched) == logged_losses(rank0)
    models = [checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / d / "checkpoint_last.pt"))["model"]
              for d in ("torchrun", "by-hand")]
    assert models[0].keys() == models[1].keys()
    for name, value in models[1].items():
        assert torch.equal(models[0][name], value), name


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_alone_stops_at_the_rendezvous_timeout(rank, toy_struct_bin, tmp_path):
    """The other rank never starts: torch's default wait is 30 minutes."""
    seconds = 4
    train = train_args(toy_struct_bin, "translation", "transformer_posattn", [], BATCH)
    proc = run(hand_launched(train, rank, free_port()), check=False, timeout=90,
               env={distributed_launch.TIMEOUT_VARIABLE: str(seconds)})
    assert proc.returncode != 0
    assert re.search(r"fairseq-train: error: rank %d gave up after %d s at tcp://127\.0\.0\.1:\d+ "
                     r"waiting for rank %d \(--distributed-world-size 2\) to join \(torch: "
                     % (rank, seconds, 1 - rank), proc.stderr), proc.stderr[-3000:]
    assert "FAIRSEQ_POSATTN_RENDEZVOUS_TIMEOUT=SECONDS to wait longer" in proc.stderr


# --------------------------------------------------------------------------
# every parameter gets a gradient, whatever the options
# --------------------------------------------------------------------------

# A grid over the options, each one with its neighbours whose parameters could
# be left out of the graph: P/R in the first layer only (the tables of the other
# layers do not exist) or in all, Shaw keys without values, tables wider than the
# batch (only their middle rows are reached), the short-cut on and off, no
# self-attention layers at all (L = 0), no recurrent layers, either stack first.
GRID = {
    "stock": [],
    "P-first": ["--position-interactions", "P", "--encoder-position-embedding", "none"],
    "R-all": ["--position-interactions", "R", "--position-interaction-layers", "all"],
    "PR-first+conv2d": ["--position-interactions", "PR", "--convolved-attention", "2d"],
    "conv1d+temp": ["--convolved-attention", "1d", "--learnable-temperature"],
    "shaw-keys-only": ["--relative-positions", "--no-relative-values"],
    "shaw-wide+bilan-wide": ["--relative-positions", "--max-relative-position", "40",
                             "--query-relative-positions", "--query-relative-clip", "40"],
    "pe-concat-learned": ["--encoder-position-embedding", "concat", "--encoder-learned-pos"],
    "struct-fuse+rel-keys-only": ["--structural-position-embedding", "fuse",
                                  "--structural-relative-positions", "--no-relative-values"],
    "struct-add-no-sequential": ["--structural-position-embedding", "add",
                                 "--encoder-position-embedding", "none"],
    "struct-fuse-no-token-positions": ["--structural-position-embedding", "fuse",
                                       "--no-token-positional-embeddings"],
    "onlstm+san+shortcut": ["--encoder-recurrent-layers", "1", "--encoder-shortcut"],
    "onlstm+san-no-shortcut+P": ["--encoder-recurrent-layers", "1", "--position-interactions", "P"],
    "san-first+onlstm-uni-chunk2": ["--encoder-recurrent-layers", "1", "--encoder-stack-order",
                                    "attention-first", "--encoder-recurrent-unidirectional",
                                    "--encoder-onlstm-chunk-size", "2"],
    "onlstm-only (L=0)": ["--encoder-recurrent-layers", "2", "--encoder-layers", "0",
                          "--encoder-learned-pos"],
    "lstm-only (L=0)": ["--encoder-recurrent-layers", "1", "--encoder-recurrent-cell", "lstm",
                        "--encoder-layers", "0", "--encoder-position-embedding", "none"],
    "lstm+san+struct+pre-norm": ["--encoder-recurrent-layers", "1", "--encoder-recurrent-cell",
                                 "lstm", "--structural-position-embedding", "fuse",
                                 "--structural-relative-positions", "--encoder-normalize-before"],
}


def build_model(flags):
    from fairseq import options
    from fairseq.data import Dictionary

    from fairseq_posattn.models.transformer_posattn import PositionAwareTransformerModel

    vocab = Dictionary()
    for word in "a b c d e f g h".split():
        vocab.add_symbol(word)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "translation", "--arch", "transformer_posattn", *TINY,
        "--max-source-positions", "16", "--interaction-max-len", "16", *flags])
    task = type("Task", (), {"source_dictionary": vocab, "target_dictionary": vocab})
    torch.manual_seed(0)
    return PositionAwareTransformerModel.build_model(args, task), vocab


def toy_batch(vocab):
    """Three left-padded sentences (fairseq's layout) with trees."""
    g = torch.Generator().manual_seed(0)
    lengths = [6, 3, 5]
    T = max(lengths)
    tokens = torch.full((3, T), vocab.pad())
    depths = torch.zeros(3, T, dtype=torch.long)
    relative = torch.zeros(3, T, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        tokens[b, T - n:] = torch.randint(vocab.nspecial, len(vocab), (n,), generator=g)
        tokens[b, -1] = vocab.eos()
        depths[b, T - n:] = torch.randint(0, 4, (n,), generator=g)
        relative[b, T - n:, T - n:] = torch.randint(-5, 6, (n, n), generator=g)
    return dict(src_tokens=tokens, src_lengths=torch.tensor(lengths), prev_output_tokens=tokens,
                src_depths=depths, src_structural_positions=relative)


@pytest.fixture(scope="module")
def process_group():
    """A one-process gloo group: enough for DistributedDataParallel's
    unused-parameter check, which fires whatever the world size."""
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % free_port(),
                            rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def loss_of(model, batch):
    logits = model(**batch)[0]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                             batch["src_tokens"].reshape(-1))


@pytest.mark.parametrize("name", sorted(GRID))
def test_every_parameter_gets_a_gradient(name, process_group):
    """fairseq's default --ddp-backend pytorch_ddp (GPUs) wraps the model in
    DistributedDataParallel without --find-unused-parameters: a parameter
    without a gradient in one update makes the next one fail."""
    model, vocab = build_model(GRID[name])
    model.train()
    batch = toy_batch(vocab)
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
    loss_of(ddp, batch).backward()
    without = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert without == [], "parameters without a gradient: %s" % without
    loss_of(ddp, batch).backward()  # raises if the reducer missed a gradient


def test_layerdrop_leaves_parameters_without_gradients(process_group):
    """The one option that does (a layer dropped with probability 1 here):
    DistributedDataParallel fails in the next update."""
    model, vocab = build_model(["--encoder-layerdrop", "1.0"])
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
    batch = toy_batch(vocab)
    loss_of(ddp, batch).backward()
    assert model.encoder.layers[0].fc1.weight.grad is None
    with pytest.raises(RuntimeError, match="find_unused_parameters"):
        loss_of(ddp, batch).backward()


@pytest.mark.parametrize("flags, refused", [
    (["--encoder-layerdrop", "0.2"], True),
    (["--decoder-layerdrop", "0.2", "--ddp-backend", "c10d"], True),
    (["--encoder-layerdrop", "0.2", "--find-unused-parameters"], False),
    (["--encoder-layerdrop", "0.2", "--ddp-backend", "legacy_ddp"], False),
])
def test_layerdrop_across_processes_needs_find_unused_parameters(flags, refused):
    multi = ["--distributed-world-size", "2", *flags]
    if refused:
        with pytest.raises(ValueError, match="add --find-unused-parameters"):
            build_model(multi)
    else:
        build_model(multi)
    build_model(flags)  # one process: no data parallelism, nothing to refuse
