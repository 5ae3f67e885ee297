"""Shared helpers for the test suite: running fairseq CLIs, toy data fixtures.

Tiers: a test marked ``slow`` trains a model, runs a command line or a recipe
(seconds to minutes each); ``pytest -m "not slow"`` is the unit loop (float64
and loop references, trees, data, tools: a few minutes at most).  A test is
slow when its module says so (``pytestmark``), when it is marked itself, or
when it uses one of the fixtures that train a model (:data:`TRAINING_FIXTURES`).
"""

import contextlib
import io
import itertools
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence
from unittest import mock

import pytest

# Triton kernels (the ON-LSTM's fused GPU step) run in Triton's interpreter on
# a machine without a GPU; it is chosen when a kernel is defined, so before
# the package is imported.
if not os.environ.get("TRITON_INTERPRET"):
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(autouse=True)
def restore_root_logging():
    """Command-line entry points called in-process reconfigure the root logger
    (``logging.basicConfig(force=True)``) onto the test's captured stderr, which
    pytest closes after the test; put the root logger back as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def pytest_configure(config):
    """Under pytest-xdist, share the cores among the workers: torch in each
    worker gets its part of them, not all of them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(scope="session")
def forkserver():
    """The forkserver of the plugin's worker pools started (it imports the
    plugin, once per process), so that what a test times is the pool alone."""
    from fairseq_posattn.data.workers import worker_pool

    with worker_pool(1):
        pass


# module- or session-scoped fixtures that train a model with fairseq-train
TRAINING_FIXTURES = {"struct_checkpoint", "struct_run", "hybrid_checkpoint",
                     "trained_checkpoints", "odd_checkpoint"}


def pytest_collection_modifyitems(items):
    for item in items:
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def one_torch_thread():
    """Tiny models: one thread is many times faster on a loaded machine, and
    keeps parallel test workers apart."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "fairseq_posattn"
BIN_DIR = Path(sys.executable).parent

# A tiny transformer: every CLI run of it takes a few seconds on one CPU core.
TINY_MODEL_ARGS = [
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]
# --required-batch-size-multiple stays at fairseq's default (8): the plugin keeps
# the last batch that fairseq-fixed would drop, and the tests count every sentence.
COMMON_ARGS = ["--cpu", "--num-workers", "0"]

TOY_SIZES = {"train": 60, "valid": 10, "test": 10}


def cli(name: str) -> str:
    """Path of a console script of the running environment (fairseq-train, ...)."""
    path = BIN_DIR / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail("console script %s not found next to %s or on PATH" % (name, sys.executable))
    return found


def subprocess_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    # tiny models: one thread is faster and keeps parallel test workers apart
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def _tail(text: str, n: int = 4000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


def run(args: Sequence[str], *, input: Optional[str] = None, check: bool = True,
        timeout: float = 300, cwd=None, env: Optional[Dict[str, str]] = None
        ) -> subprocess.CompletedProcess:
    """Run a command; on an unexpected exit code fail with its output."""
    proc = subprocess.run(
        [str(a) for a in args], input=input, capture_output=True, text=True,
        timeout=timeout, cwd=cwd, env=subprocess_env(env),
    )
    if check and proc.returncode != 0:
        pytest.fail(
            "command failed with exit code %d: %s\n--- stdout ---\n%s\n--- stderr ---\n%s"
            % (proc.returncode, " ".join(map(str, args)), _tail(proc.stdout), _tail(proc.stderr))
        )
    return proc


def run_cli(name: str, *args, **kwargs) -> subprocess.CompletedProcess:
    """Run a fairseq console script, e.g. ``run_cli("fairseq-train", data, ...)``."""
    return run([cli(name), *args], **kwargs)


def run_cli_in_process(name: str, *args, input: str = "") -> str:
    """Run the entry point of console script ``name`` in this process as the
    script runs it (``sys.argv``, ``input`` on stdin); returns its stdout.
    Spares the interpreter start and imports of :func:`run_cli` where the
    test is about what the command does, not about a fresh process."""
    from importlib.metadata import entry_points

    import torch
    from fairseq import checkpoint_utils

    (entry,) = entry_points(group="console_scripts", name=name)
    # fairseq-train keeps the best validation score of the process on
    # save_checkpoint: every run starts without one, as in a fresh process
    saved = vars(checkpoint_utils.save_checkpoint)
    saved.pop("best", None)
    out, threads = io.StringIO(), torch.get_num_threads()
    torch.set_num_threads(1)  # as subprocess_env sets for run_cli
    try:
        with mock.patch.object(sys, "argv", [name, *map(str, args)]), \
                mock.patch.object(sys, "stdin", io.StringIO(input)), contextlib.redirect_stdout(out):
            entry.load()()
    finally:
        torch.set_num_threads(threads)
        saved.pop("best", None)
    return out.getvalue()


def run_python(code: str, *args, **kwargs) -> subprocess.CompletedProcess:
    """Run ``code`` with ``args`` in a fresh interpreter (fresh sys.modules and
    torch state)."""
    return run([sys.executable, "-c", code, *args], **kwargs)


def read_trees(prefix) -> list:
    """``(heads, piece_words)`` lists of every sentence of the tree file
    ``{prefix}.trees`` that fairseq-posattn-preprocess wrote."""
    from fairseq.data import data_utils

    from fairseq_posattn.structure import decode_piece_tree

    trees = data_utils.load_indexed_dataset(f"{prefix}.trees", None)
    assert trees is not None, f"{prefix}.trees.{{bin,idx}} not found"
    return [tuple(part.tolist() for part in decode_piece_tree(trees[i]))
            for i in range(len(trees))]


def random_piece_tree(n_pieces: int, seed: int):
    """An encoded tree (``encode_piece_tree``) of ``n_pieces`` pieces: words of one or two pieces, each
    word's head an earlier word (the first is the root)."""
    import numpy as np

    from fairseq_posattn.structure import encode_piece_tree

    rng = np.random.default_rng(seed)
    steps = np.concatenate([[1], rng.integers(0, 2, n_pieces - 1)]) if n_pieces else np.zeros(0, np.int64)
    piece_words = np.cumsum(steps) - 1
    words = int(piece_words[-1]) + 1 if n_pieces else 0
    heads = [0] + [int(rng.integers(1, w + 1)) for w in range(1, words)]
    return encode_piece_tree(heads, piece_words)


def encoded_tree_inputs(trees, tree_inputs, left_pad: bool = True) -> dict:
    """The ``net_input`` tree tensors that ``tree_inputs`` (a ``TreeInputs``) names, of encoded ``trees``
    (their pieces and EOS), padded as fairseq pads the source (``left_pad``)."""
    from fairseq_posattn.structure import batch_tree_inputs

    return batch_tree_inputs(trees, tree_inputs, left_pad=left_pad)


def grouped_words(line: str, pattern: Optional[str] = None) -> str:
    """The subword-nmt pieces of ``line`` grouped into words by the ``@@`` of
    the pieces of ``pattern`` (by default ``line``), as text-tree alignment
    errors show them: ``[un@@ believ@@ able] [.]``."""
    marks = (pattern or line).split()
    words = []
    for k, piece in enumerate(line.split()):
        if k == 0 or not marks[k - 1].endswith("@@"):
            words.append([])
        words[-1].append(piece)
    return " ".join("[" + " ".join(word) + "]" for word in words)


def children_started_since(before: list) -> list:
    """The child processes of multiprocessing alive now that were not in
    ``before`` (an earlier ``multiprocessing.active_children()``): what a
    test left behind, whatever other tests left."""
    import multiprocessing

    return [child for child in multiprocessing.active_children() if child not in before]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_training(data_bin: Path, save_dir: Path, arch: str = "transformer", extra=(),
                  max_update: int = 4) -> list:
    """fairseq-train's arguments for a tiny model, a few updates, the plugin loaded."""
    return [data_bin, "--user-dir", USER_DIR, "--task", "translation", "--arch", arch,
            *TINY_MODEL_ARGS, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
            "--max-update", str(max_update), "--seed", "1",
            "--save-dir", save_dir, "--no-progress-bar", *COMMON_ARGS, *extra]


def train_tiny(data_bin: Path, save_dir: Path, arch: str = "transformer", extra=(),
               max_update: int = 4, **kwargs) -> subprocess.CompletedProcess:
    """fairseq-train (a subprocess) a tiny model for a few updates with the plugin loaded."""
    return run_cli("fairseq-train", *tiny_training(data_bin, save_dir, arch, extra, max_update),
                   **kwargs)


@pytest.fixture(scope="session")
def toy_raw(tmp_path_factory) -> Path:
    """Toy corpus (60/10/10 sentences) as plain text + CoNLL-U."""
    from fairseq_posattn.toy_corpus import write_corpus

    out = tmp_path_factory.mktemp("toy-raw")
    write_corpus(str(out), seed=1, **TOY_SIZES)
    return out


@pytest.fixture(scope="session")
def toy_data_bin(toy_raw, tmp_path_factory) -> Path:
    """The toy corpus binarized by fairseq-preprocess (joined dictionary)."""
    out = tmp_path_factory.mktemp("toy-bin")
    run_cli(
        "fairseq-preprocess", "--source-lang", "en", "--target-lang", "de",
        "--trainpref", toy_raw / "train", "--validpref", toy_raw / "valid",
        "--testpref", toy_raw / "test", "--destdir", out,
        "--joined-dictionary", "--workers", "1",
    )
    assert (out / "dict.en.txt").exists() and (out / "test.en-de.en.bin").exists()
    return out


@pytest.fixture(scope="session")
def toy_struct_bin(toy_raw, tmp_path_factory) -> Path:
    """The toy corpus (whole words, no BPE) binarized with its trees by
    fairseq-posattn-preprocess: serves --task translation and translation_struct."""
    out = tmp_path_factory.mktemp("toy-struct-bin")
    run(
        [sys.executable, "-m", "fairseq_posattn.data.preprocess", "--source-lang", "en",
         "--target-lang", "de", "--trainpref", toy_raw / "train", "--validpref",
         toy_raw / "valid", "--testpref", toy_raw / "test", "--destdir", out,
         "--joined-dictionary", "--workers", "1"],
    )
    assert (out / "train.en-de.en.trees.bin").exists()
    return out


# fairseq-train's own main, plus a record of what the trainer did: the exact
# loss sum, sample size and sentence ids of every forward/backward pass of the
# task, and the parameters of the model before and after training (on every
# rank: fairseq itself saves rank 0's only).
RECORDED_TRAIN = """
import sys, torch
from fairseq import trainer as trainer_module

made = []
original_init = trainer_module.Trainer.__init__

def init(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    made.append(self)
    self.recorded_steps = []
    self.initial_params = {k: v.detach().clone() for k, v in self.get_model().state_dict().items()}
    task_train_step = self.task.train_step

    def train_step(sample, *a, **kw):
        loss, sample_size, log = task_train_step(sample, *a, **kw)
        self.recorded_steps.append((float(loss.detach()), float(sample_size), sample["id"].tolist()))
        return loss, sample_size, log

    self.task.train_step = train_step

trainer_module.Trainer.__init__ = init
record = sys.argv[1]
sys.argv = ["fairseq-train"] + sys.argv[2:]
from fairseq_cli.train import cli_main
cli_main()
trainer = made[0]
torch.save({"steps": trainer.recorded_steps, "initial": trainer.initial_params,
            "final": {k: v.detach().clone() for k, v in trainer.get_model().state_dict().items()}},
           record)
"""


def recorded_train_command(record: Path, *train_args) -> list:
    """The command line of a fairseq-train run that writes its record to ``record``
    (load it with :func:`load_record`)."""
    return [sys.executable, "-c", RECORDED_TRAIN, str(record), *map(str, train_args)]


def load_record(record: Path) -> dict:
    import torch

    return torch.load(str(record), weights_only=True)


def translates_as_the_test_set(directory: Path, checkpoint: str, task: str, lines, expected,
                               beam: int, lenpen: float = 1.0) -> None:
    """A recipe's checkpoint directory translates the raw (untokenized) lines of
    a test set into ``expected``, the recipe's own hypotheses of that set, with
    ``from_pretrained(directory)`` and ``fairseq-interactive directory``, neither
    told the tokenizer, the BPE or the parser; and a separator (U+001C, a tab
    before a space, ...) after the first word and at the end of each line
    changes no translation (the words on its two sides are not merged, no
    dangling ``@@`` stops the batch)."""
    from fairseq.models.transformer import TransformerModel

    model = TransformerModel.from_pretrained(str(directory), checkpoint_file=checkpoint,
                                             user_dir=str(USER_DIR)).eval()
    assert model.translate(lines, beam=beam, lenpen=lenpen) == expected
    separators = itertools.cycle(["\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "\v",
                                  "\t"])
    odd = [line.replace(" ", separator + " ", 1) + separator
           for line, separator in zip(lines, separators)]
    assert model.translate(odd, beam=beam, lenpen=lenpen) == expected
    proc = run_cli("fairseq-interactive", directory, "--user-dir", USER_DIR, "--task", task,
                   "--path", directory / checkpoint, "--beam", beam, "--lenpen", lenpen,
                   "--buffer-size", len(lines), "--batch-size", len(lines), "--cpu",
                   input="".join(line + "\n" for line in lines))
    hypotheses = dict(re.findall(r"^D-(\d+)\t[^\t]*\t(.*)$", proc.stdout, re.M))
    assert [hypotheses.get(str(i)) for i in range(len(lines))] == expected
