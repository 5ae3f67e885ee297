"""fairseq-posattn-preprocess at scale: the tree file is the same for any
number of parts and workers, bad input in any part is named, and memory does
not grow with the corpus (writing the trees, loading them in the task)."""

import multiprocessing
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fairseq_posattn.bench.structure import generate_corpus
from fairseq_posattn.data import preprocess
from fairseq_posattn.data.workers import STOP_SECONDS
from fairseq_posattn.structure import StructureError

from conftest import children_started_since, grouped_words, read_trees, run

TREES = "train.en-de.en.trees"


def make_corpus(directory: Path, sentences: int) -> Path:
    """Short generated sentences (about 4 words), their trees and their
    binarized text under ``directory``."""
    generate_corpus(str(directory), sentences, mean_words=4.0, progress=False)
    os.replace(directory / "tok.en.conllu", directory / "train.en.conllu")
    run([sys.executable, "-m", "fairseq_cli.preprocess", *text_args(directory)])
    return directory


def text_args(directory: Path, *extra) -> list:
    return ["--source-lang", "en", "--target-lang", "de", "--joined-dictionary",
            "--trainpref", str(directory / "train"), "--destdir", str(directory / "bin"),
            *map(str, extra)]


def write_trees(directory: Path, *extra):
    """The trees of the training split, written in this process."""
    from fairseq import options

    parser = options.get_preprocessing_parser()
    preprocess.add_tree_args(parser)
    args = parser.parse_args(text_args(directory, "--trees-only", *extra))
    return preprocess.write_trees(args, "train", str(directory / "train"), args.destdir, args.destdir)


def conllu_blocks(path: Path):
    """(first line number, lines) of every sentence of a CoNLL-U file we wrote."""
    lines = path.read_text().split("\n")
    blocks, start = [], 0
    for i, line in enumerate(lines):
        if not line:
            if i > start:
                blocks.append((start + 1, lines[start:i]))
            start = i + 1
    return blocks


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("scale") / "corpus", 200)


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(preprocess, "PART", 16)  # 13 parts of the 200 sentences


def tree_bytes(directory: Path) -> bytes:
    return b"".join((directory / "bin" / f"{TREES}.{ext}").read_bytes() for ext in ("bin", "idx"))


def test_parts_and_workers_write_the_same_file(corpus, monkeypatch):
    assert write_trees(corpus) == 200
    one_part = tree_bytes(corpus)
    words = [line.split() for line in (corpus / "tok.en").read_text().splitlines()]
    written = read_trees(corpus / "bin" / "train.en-de.en")
    assert [len(heads) for heads, _ in written] == [len(w) for w in words]
    monkeypatch.setattr(preprocess, "PART", 16)
    for workers in (1, 3):
        write_trees(corpus, "--workers", workers)
        assert tree_bytes(corpus) == one_part


def wrong_copy(corpus: Path, tmp_path: Path, change) -> Path:
    """A copy of the corpus whose CoNLL-U blocks ``change`` rewrites."""
    copy = tmp_path / "copy"
    os.makedirs(copy / "bin")
    for name in ("train.en", "train.de"):
        os.symlink(corpus / name, copy / name)
    for name in os.listdir(corpus / "bin"):
        if not name.startswith(TREES):
            os.symlink(corpus / "bin" / name, copy / "bin" / name)
    blocks = [lines for _, lines in conllu_blocks(corpus / "train.en.conllu")]
    (copy / "train.en.conllu").write_text("".join("\n".join(b) + "\n\n" for b in change(blocks)))
    return copy


def changed_word(block):
    """The block with its first word's form changed."""
    first = next(i for i, line in enumerate(block) if not line.startswith("#"))
    columns = block[first].split("\t")
    columns[1] = "changed"
    return block[:first] + ["\t".join(columns)] + block[first + 1:]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_wrong_word_in_a_later_part_names_file_sentence_and_line(
        corpus, tmp_path, small_parts, workers):
    copy = wrong_copy(corpus, tmp_path, lambda b: b[:149] + [changed_word(b[149])] + b[150:])
    start, lines = conllu_blocks(copy / "train.en.conllu")[149]
    line = start + next(i for i, text in enumerate(lines) if not text.startswith("#"))
    with pytest.raises(StructureError) as err:
        write_trees(copy, "--workers", workers)
    assert f"{copy / 'train.en.conllu'}, sentence 150, line {line}: " in str(err.value)
    assert "first difference at token 1: tree 'changed'" in str(err.value)
    assert not [name for name in os.listdir(copy / "bin") if name.startswith(TREES)]


@pytest.mark.timeout(300)
def test_a_part_failing_run_after_run_under_load_never_hangs(corpus, tmp_path, small_parts,
                                                            forkserver):
    """30 runs in a row whose 10th part fails while two other processes keep
    both cores busy: each ends within the workers' stop bound, with the
    message, and leaves no worker behind."""
    copy = wrong_copy(corpus, tmp_path, lambda b: b[:149] + [changed_word(b[149])] + b[150:])
    before = multiprocessing.active_children()
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for _ in range(30):
            started = time.monotonic()
            with pytest.raises(StructureError, match="sentence 150, line .*tree 'changed'"):
                write_trees(copy, "--workers", 2)
            assert time.monotonic() - started < 2 * STOP_SECONDS
            assert not children_started_since(before)
    finally:
        for process in load:
            process.kill()
            process.wait()


@pytest.mark.parametrize("change, needle", [
    (lambda b: b[:99] + b[100:], "sentence 100, line"),  # a tree missing in the middle
    (lambda b: b[:-1], "the file ends after 199 sentences but the text has more lines"),
    (lambda b: b + [b[0]], "sentence 201, line"),  # one tree too many
    (lambda b: b[:40], "ends after 40 sentences but"),  # whole parts without trees
])
def test_missing_and_extra_trees_are_named(corpus, tmp_path, small_parts, change, needle):
    copy = wrong_copy(corpus, tmp_path, change)
    with pytest.raises(StructureError, match=needle) as err:
        write_trees(copy, "--workers", 2)
    assert str(copy / "train.en.conllu") in str(err.value)
    assert not [name for name in os.listdir(copy / "bin") if name.startswith(TREES)]


def test_a_whitespace_line_between_two_sentences_ends_the_first(corpus, tmp_path, small_parts):
    """A line of a tab and U+00A0 as the only line between sentences 3 and 4
    is a blank line, in every part (it made the index of parts one short)."""
    copy = wrong_copy(corpus, tmp_path, lambda b: b[:2] + [b[2] + ["\t\u00a0"] + b[3]] + b[4:])
    assert write_trees(copy) == write_trees(corpus) == 200
    assert tree_bytes(copy) == tree_bytes(corpus)


def test_a_text_segmented_anew_after_binarizing_is_refused(corpus, tmp_path):
    """--trees-only over a binarized text whose file now has two lines of as
    many pieces (but other words) in each other's place, each with its own
    tree: every line fits its tree, but not the binarized sentence."""
    lines = (corpus / "train.en").read_text().splitlines()
    i, j = next((i, j) for i in range(len(lines)) for j in range(i + 1, len(lines))
                if len(lines[i].split()) == len(lines[j].split())
                and grouped_words(lines[i]) != grouped_words(lines[i], lines[j]))

    def swap(items):
        items = list(items)
        items[i], items[j] = items[j], items[i]
        return items

    copy = wrong_copy(corpus, tmp_path, swap)
    os.unlink(copy / "train.en")
    (copy / "train.en").write_text("".join(line + "\n" for line in swap(lines)))
    with pytest.raises(StructureError) as err:
        write_trees(copy)
    message = str(err.value)
    assert f"train.en, line {i + 1} (split 'train', sentence {i}; binarized in " in message
    assert (f"the subword markers (subword_nmt) group its pieces into the words "
            f"{grouped_words(lines[i])} but its tree groups them into "
            f"{grouped_words(lines[i], lines[j])} (2 sentences") in message, message
    assert not [name for name in os.listdir(copy / "bin") if name.startswith(TREES)]


def peak_bytes(step) -> int:
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def load_split(directory: Path):
    """What translation_struct adds to loading a split: the tree file,
    checked against the binarized source (sizes and word starts); the
    dictionary, which fairseq loads anyway, is read beforehand."""
    from fairseq.data import Dictionary

    from fairseq_posattn.data.alignment import WordStarts
    from fairseq_posattn.data.tree_files import load_trees

    words = WordStarts(Dictionary.load(str(directory / "bin" / "dict.en.txt")), "subword_nmt")

    def step():
        load_trees(str(directory / "bin"), "train", "en", "de", "mmap", False, 1, words)

    return step


@pytest.mark.slow
def test_memory_does_not_grow_with_the_corpus(tmp_path, monkeypatch):
    """Peak Python memory (tracemalloc) of writing and of loading the trees
    of N and of 10 N sentences, both many parts and blocks long: a list of
    one int per sentence would add about 1 MB at 10 N; the allowance is a
    quarter of that."""
    from fairseq_posattn.data import tree_files

    monkeypatch.setattr(preprocess, "PART", 500)
    monkeypatch.setattr(tree_files, "BLOCK", 1000)
    small, large = (make_corpus(tmp_path / name, n) for name, n in (("small", 3000),
                                                                       ("large", 30000)))
    for step in ("write", "load"):
        def measure(directory):
            return peak_bytes((lambda: write_trees(directory)) if step == "write"
                              else load_split(directory))

        measure(small)  # warm-up: imports, caches
        peaks = [measure(small), measure(large)]
        assert peaks[1] - peaks[0] < 256 * 1024, (step, peaks)
    assert len(read_trees(large / "bin" / "train.en-de.en")) == 30000
    assert np.all(np.diff([os.path.getsize(d / "bin" / f"{TREES}.bin") for d in (small, large)]) > 0)
