"""The structure pipeline on real gold trees: the English side of Parallel
Universal Dependencies (CoNLL-U) with its German translations -> BPE ->
fairseq-posattn-preprocess -> transformer_struct -> fairseq-generate.

Runs when PUD_DIR names a directory with en_pud-ud-test.conllu and
de_pud-ud-test.conllu (UD_English-PUD and UD_German-PUD, CC BY-SA 3.0);
skipped otherwise."""

import os
import sys
from pathlib import Path

import pytest

from fairseq_posattn.structure import piece_structure, read_conllu, write_conllu

from conftest import COMMON_ARGS, TINY_MODEL_ARGS, USER_DIR, read_trees, run, run_cli
from test_translation_struct import pieces_of

PUD = Path(os.environ.get("PUD_DIR", "/nonexistent"))
pytestmark = pytest.mark.skipif(
    not (PUD / "en_pud-ud-test.conllu").is_file(),
    reason="set PUD_DIR=<directory with en_pud-ud-test.conllu, de_pud-ud-test.conllu> to run")

SPLITS = {"train": slice(0, 900), "valid": slice(900, 950), "test": slice(950, 1000)}


@pytest.fixture(scope="module")
def pud_bin(tmp_path_factory):
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    english = list(read_conllu(str(PUD / "en_pud-ud-test.conllu")))
    german = list(read_conllu(str(PUD / "de_pud-ud-test.conllu")))
    assert len(english) == len(german) == 1000
    assert [t.sent_id for t in english] == [t.sent_id for t in german]
    work = tmp_path_factory.mktemp("pud")
    joint = work / "joint.txt"
    joint.write_text("".join(" ".join(t.words) + "\n" for t in english[:900] + german[:900]))
    with open(joint) as text, open(work / "codes", "w") as codes:
        learn_bpe(text, codes, 2000)
    with open(work / "codes") as codes:
        bpe = BPE(codes)
    for split, rows in SPLITS.items():
        write_conllu(english[rows], str(work / f"{split}.en.conllu"))
        for lang, trees in (("en", english), ("de", german)):
            (work / f"{split}.{lang}").write_text(
                "".join(bpe.process_line(" ".join(t.words)) + "\n" for t in trees[rows]))
    dest = work / "bin"
    run([sys.executable, "-m", "fairseq_posattn.data.preprocess", "--source-lang", "en",
         "--target-lang", "de", *[f"--{s}pref={work / s}" for s in SPLITS],
         "--destdir", dest, "--joined-dictionary", "--workers", "1"])
    return work, dest, english


def test_every_pud_sentence_gets_its_tree(pud_bin):
    from fairseq.data import data_utils

    work, dest, english = pud_bin
    for split, rows in SPLITS.items():
        written = read_trees(dest / f"{split}.en-de.en")
        tokens = data_utils.load_indexed_dataset(str(dest / f"{split}.en-de.en"), None)
        trees = english[rows]
        assert len(written) == len(tokens) == len(trees)
        for i, (tree, (heads, pieces)) in enumerate(zip(trees, written)):
            assert heads == tree.heads
            assert len(pieces) + 1 == tokens.sizes[i]
            assert pieces[-1] == len(tree.words) - 1


def test_translation_struct_batches_match_the_gold_trees(pud_bin):
    from fairseq import options, tasks

    work, dest, english = pud_bin
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(dest), "--task", "translation_struct", "--arch", "transformer_struct",
        "--source-lang", "en", "--target-lang", "de"])
    task = tasks.setup_task(args)
    task.load_dataset("test")
    dataset = task.dataset("test")
    lines = (work / "test.en").read_text().splitlines()
    for batch in task.get_batch_iterator(dataset, max_sentences=16).next_epoch_itr(shuffle=False):
        net = batch["net_input"]
        for row, sentence in enumerate(batch["id"].tolist()):
            depth, rel = piece_structure(english[950 + sentence].heads, pieces_of(lines[sentence]))
            cols = net["src_tokens"][row].ne(task.src_dict.pad()).nonzero().flatten()
            assert net["src_depths"][row, cols].tolist() == depth.tolist()
            assert net["src_structural_positions"][row][cols][:, cols].tolist() == rel.tolist()


def test_train_and_generate_on_pud(pud_bin, tmp_path):
    work, dest, _ = pud_bin
    run_cli("fairseq-train", dest, "--user-dir", USER_DIR, "--task", "translation_struct",
            "--arch", "transformer_struct", *TINY_MODEL_ARGS, "--optimizer", "adam",
            "--lr", "1e-3", "--max-tokens", "2000", "--max-update", "3",
            "--save-dir", tmp_path, "--no-progress-bar", *COMMON_ARGS)
    gen = run_cli("fairseq-generate", dest, "--user-dir", USER_DIR, "--task", "translation_struct",
                  "--path", tmp_path / "checkpoint_last.pt", "--gen-subset", "test",
                  "--beam", "2", "--max-len-b", "5", "--batch-size", "16", *COMMON_ARGS)
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 50
