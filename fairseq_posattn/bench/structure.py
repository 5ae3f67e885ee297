"""The structure pipeline at scale: ``fairseq-posattn-bench-structure``.

    fairseq-posattn-bench-structure --sentences 520000 --work /tmp/scale [--workers 2]

Generates (once per ``--work``, ``--sentences`` and ``--seed``) a corpus of
WMT-like length (log-normal words per sentence, mean about 22; a Zipfian
vocabulary whose words keep one subword split; a random projective tree per
sentence), then runs each step (checking a parse, binarizing, writing the tree
files, a pass over the batches) as its own process beside fairseq's
counterpart on the same data and prints per step the sentences per
second (process start-up and data loading excluded), the peak resident memory
and the bytes per sentence written.  ``--code DIR`` runs the steps with the
``fairseq_posattn`` of another checkout, for before/after figures on the same
corpus.  Every step's log is kept under ``--work``.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional

import numpy as np
from tqdm import tqdm

from ..structure import DependencyTree, write_conllu
from ..structure.control_trees import random_projective_heads
from .timing import write_json

WMT14_SENTENCES = 4_500_000
MAX_PIECES = 250
PIECES_PER_WORD = ([1, 2, 3], [0.8, 0.15, 0.05])
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


class Vocabulary:
    """``size`` word types, drawn with Zipfian frequencies; each keeps one
    split into 1-3 subword pieces, as a BPE model splits a word."""

    def __init__(self, rng: np.random.Generator, size: int = 50_000):
        self.rng = rng
        weights = 1.0 / np.arange(1, size + 1)
        self.cumulative = np.cumsum(weights / weights.sum())
        pieces = rng.choice(PIECES_PER_WORD[0], size=size, p=PIECES_PER_WORD[1])
        self.words, self.pieces = [], []
        for t, k in enumerate(pieces):
            word = "".join(LETTERS[rng.integers(0, 26, size=int(k) + 3 + t % 5)])
            cuts = np.linspace(0, len(word), int(k) + 1).astype(int)
            self.words.append(word)
            self.pieces.append(" ".join(word[a:b] + ("@@" if b < len(word) else "")
                                        for a, b in zip(cuts[:-1], cuts[1:])))
        self.piece_count = pieces

    def sentence(self, n_words: int) -> np.ndarray:
        """Word types of a sentence of at most ``n_words`` words and
        :data:`MAX_PIECES` pieces."""
        types = np.searchsorted(self.cumulative, self.rng.random(n_words))
        types = np.minimum(types, len(self.words) - 1)
        fits = np.cumsum(self.piece_count[types]) <= MAX_PIECES
        return types[fits]


def generate_corpus(directory: str, sentences: int, seed: int = 1,
                    mean_words: float = 22.0, sigma: float = 0.6,
                    progress: bool = True) -> Dict[str, object]:
    """Write ``tok.en`` (words), ``tok.en.conllu`` (their trees), ``train.en``
    (subword pieces), ``train.de`` (another sentence of pieces) under
    ``directory``; return the corpus's statistics."""
    rng = np.random.default_rng(seed)
    vocab = Vocabulary(rng)
    mu = np.log(mean_words) - sigma ** 2 / 2  # the log-normal's mean is mean_words
    lengths = np.clip(np.rint(rng.lognormal(mu, sigma, size=(sentences, 2))), 1, MAX_PIECES)
    os.makedirs(directory, exist_ok=True)
    paths = {name: os.path.join(directory, name)
             for name in ("tok.en", "tok.en.conllu", "train.en", "train.de")}
    words = pieces = 0
    with open(paths["tok.en"], "w") as tok, open(paths["train.en"], "w") as src, \
            open(paths["train.de"], "w") as tgt, open(paths["tok.en.conllu"], "w") as conllu:
        for i in tqdm(range(sentences), desc="corpus", unit=" sentences", disable=not progress):
            types = vocab.sentence(int(lengths[i, 0]))
            line = [vocab.words[t] for t in types]
            tok.write(" ".join(line) + "\n")
            src.write(" ".join(vocab.pieces[t] for t in types) + "\n")
            tgt.write(" ".join(vocab.pieces[t] for t in vocab.sentence(int(lengths[i, 1]))) + "\n")
            write_conllu([DependencyTree(words=line,
                                         heads=random_projective_heads(len(line), rng))], conllu)
            words += len(types)
            pieces += int(vocab.piece_count[types].sum())
    return {"sentences": sentences, "seed": seed, "words_per_sentence": words / sentences,
            "pieces_per_sentence": pieces / sentences}


def corpus(work: str, sentences: int, seed: int) -> Dict[str, object]:
    """The corpus under ``work/corpus``, generated unless it exists for the
    same size and seed."""
    directory = os.path.join(work, "corpus")
    stamp = os.path.join(directory, "corpus.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            stats = json.load(f)
        if stats["sentences"] == sentences and stats["seed"] == seed:
            return stats
        shutil.rmtree(directory)
    stats = generate_corpus(directory, sentences, seed)
    with open(stamp, "w") as f:
        json.dump(stats, f)
    return stats


# one pass over the batches of the training split, loading excluded; the
# seconds of loading that check the trees against the text, where the code has that check
BATCH_PASS = """
import json, sys, time
import fairseq_posattn
from fairseq import options, tasks
from fairseq_posattn.data import tree_files
checks = []
if hasattr(tree_files, "refuse_unaligned"):
    check = tree_files.refuse_unaligned
    def timed(*args):
        began = time.perf_counter()
        check(*args)
        checks.append(time.perf_counter() - began)
    tree_files.refuse_unaligned = timed
task_name, arch, data = sys.argv[1:4]
args = options.parse_args_and_arch(options.get_training_parser(), [
    data, "--task", task_name, "--arch", arch, "--source-lang", "en", "--target-lang", "de",
    "--max-tokens", "4096"])
task = tasks.setup_task(args)
start = time.perf_counter()
task.load_dataset("train")
batches = task.get_batch_iterator(task.dataset("train"), max_tokens=4096).next_epoch_itr(
    shuffle=False)
loaded = time.perf_counter()
sentences = sum(len(batch["id"]) for batch in batches)
print(json.dumps({"load_seconds": loaded - start, "seconds": time.perf_counter() - loaded,
                  "sentences": sentences, "check_seconds": sum(checks) if checks else None}))
"""


class Steps:
    """Runs the steps as processes, each timed with its peak resident memory."""

    def __init__(self, work: str, code: Optional[str]):
        self.work = work
        self.env = dict(os.environ)
        if code:
            self.env["PYTHONPATH"] = os.pathsep.join(
                [os.path.abspath(code)] + [p for p in [self.env.get("PYTHONPATH")] if p])
        self.env.setdefault("OMP_NUM_THREADS", "1")

    def run(self, name: str, argv: List[str]) -> Dict[str, float]:
        """Wall seconds, peak resident MB, and the seconds the same command
        takes with ``--help`` (starting Python, importing, parsing the
        arguments), which the throughput leaves out."""
        result = self._run(name, argv)
        result["startup_seconds"] = self._run(f"{name}.startup", [*argv[:2], "--help"])["seconds"]
        return result

    def _run(self, name: str, argv: List[str]) -> Dict[str, float]:
        log_path = os.path.join(self.work, f"{name}.log")
        with open(log_path, "w") as log:
            start = time.perf_counter()
            proc = subprocess.Popen([sys.executable, *argv], env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=self.work)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"fairseq-posattn-bench-structure: step {name} failed: see {log_path}")
        return {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024}


def file_bytes(directory: str, names: List[str]) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in names
               if os.path.exists(os.path.join(directory, n)))


def measure(args) -> Dict[str, object]:
    stats = corpus(args.work, args.sentences, args.seed)
    n = args.sentences
    data = os.path.join(args.work, "corpus")
    out = os.path.join(args.work, "out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    steps = Steps(args.work, args.code)
    workers = ["--workers", str(args.workers)]
    results = {}

    checked = os.path.join(out, "train.en.conllu")
    results["check"] = steps.run("check", [
        "-m", "fairseq_posattn.data.parse", "--input", os.path.join(data, "tok.en"),
        "--parser", "conllu", "--conllu", os.path.join(data, "tok.en.conllu"),
        "--output", checked, "--no-progress-bar", *workers])
    for lang in ("en", "de"):
        os.symlink(os.path.join(data, f"train.{lang}"), os.path.join(out, f"train.{lang}"))
    bin_dir = os.path.join(out, "bin")
    text_args = ["--source-lang", "en", "--target-lang", "de", "--joined-dictionary",
                 "--trainpref", os.path.join(out, "train"), "--destdir", bin_dir, *workers]
    results["binarize"] = steps.run("binarize", ["-m", "fairseq_cli.preprocess", *text_args])
    results["binarize"]["bytes"] = file_bytes(bin_dir, ["train.en-de.en.bin", "train.en-de.en.idx"])
    results["trees"] = steps.run("trees", ["-m", "fairseq_posattn.data.preprocess",
                                           *text_args, "--trees-only"])
    prefix = "train.en-de.en."
    results["trees"]["bytes"] = file_bytes(bin_dir, [
        prefix + f"{name}.{ext}" for name in ("trees", "heads", "piece2word")
        for ext in ("bin", "idx")])
    for name, task, arch in (("batches", "translation", "transformer"),
                             ("batches_struct", "translation_struct", "transformer_struct")):
        results[name] = steps._run(name, ["-c", BATCH_PASS, task, arch, bin_dir])
        with open(os.path.join(args.work, f"{name}.log")) as log:
            inner = json.loads(log.read().strip().splitlines()[-1])
        if inner["sentences"] != n:
            raise SystemExit(f"{name}: {inner['sentences']} sentences in the batches, not {n}")
        results[name].update(inner)
    return {"corpus": stats, "workers": args.workers, "code": args.code or "this checkout",
            "steps": results}


ROWS = [  # key, what, fairseq's counterpart
    ("check", "check an existing parse: `fairseq-posattn-parse --parser conllu`", None),
    ("binarize", "binarize the text, both sides: `fairseq-preprocess`", None),
    ("trees", "write the tree files: `fairseq-posattn-preprocess --trees-only`", "binarize"),
    ("batches", "one pass over the batches: `translation`", None),
    ("batches_struct", "one pass over the batches: `translation_struct`", "batches"),
]


def report(result: Dict[str, object]) -> str:
    n = result["corpus"]["sentences"]
    steps = result["steps"]
    lines = [
        f"{n} sentences ({result['corpus']['words_per_sentence']:.1f} words, "
        f"{result['corpus']['pieces_per_sentence']:.1f} pieces per sentence), "
        f"--workers {result['workers']}, code: {result['code']}",
        "",
        "| step | sentences/s | × fairseq | peak MB | bytes/sentence | at WMT14 size (4.5M): "
        "minutes, disk |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    def rate(step):
        return n / (step["seconds"] - step.get("startup_seconds", 0.0))

    for key, what, counterpart in ROWS:
        step = steps[key]
        ratio = f"{rate(step) / rate(steps[counterpart]):.2f}" if counterpart else "–"
        per_sentence = step.get("bytes", 0) / n
        wmt = f"{WMT14_SENTENCES / rate(step) / 60:.1f}"
        if per_sentence:
            wmt += f", {per_sentence * WMT14_SENTENCES / 1e9:.2f} GB"
        cell = f"{per_sentence:.1f}" if per_sentence else "–"
        lines.append(f"| {what} | {rate(step):,.0f} | {ratio} | {step['peak_mb']:,.0f} | {cell} | "
                     f"{wmt} |")
    lines += ["", "Rates leave out starting the process (the same command with --help: "
              + ", ".join(f"{k} {steps[k]['startup_seconds']:.1f} s" for k, _, _ in ROWS[:3])
              + ") and, for the batch passes, loading the data ("
              + ", ".join(f"{steps[k]['load_seconds']:.1f} s" for k, _, _ in ROWS[3:]) + ")."]
    check = steps["batches_struct"].get("check_seconds")
    if check is not None:
        lines.append(f"Loading `translation_struct` includes {check:.2f} s of checking the trees "
                     f"against the text (sizes and the word starts of the subword markers): "
                     f"{n / check:,.0f} sentences/s.")
    return "\n".join(lines)


def cli_main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="fairseq-posattn-bench-structure", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=52_000)
    p.add_argument("--work", required=True, help="directory for the corpus, outputs and logs")
    p.add_argument("--workers", type=int, default=1, help="--workers of every step")
    p.add_argument("--seed", type=int, default=1, help="of the generated corpus")
    p.add_argument("--code", default=None,
                   help="run the steps with the fairseq_posattn of this checkout")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    result = measure(args)
    print(report(result))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    cli_main()
