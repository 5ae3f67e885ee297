"""fairseq-posattn-dump-states and fairseq-posattn-probe (Hao et al. 2019 /
Wang et al. 2019, Table 3): mean-pooled vectors of every encoder part,
checked against the layers' own outputs one sentence at a time, independent
of batching and padding; probes above the majority baseline where the
vectors carry the label."""

from collections import Counter

import numpy as np
import pytest
import torch

from conftest import TOY_SIZES, run_cli_in_process, tiny_training

from fairseq_posattn.analysis import probe as probe_cli
from fairseq_posattn.analysis import states as states_cli
from fairseq_posattn.analysis.source import CheckpointEncoder
from fairseq_posattn.toy_corpus import generate_examples, to_conllu
from fairseq_posattn.structure import StructureError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the ON-LSTM + SAN hybrid with structural positions in its SAN part: one
# recurrent and one self-attention layer, trees from the data
HYBRID_ARGS = (
    "--task", "translation_struct", "--encoder-recurrent-layers", "1", "--encoder-layers", "1",
    "--structural-position-embedding", "add", "--structural-relative-positions",
    "--max-source-positions", "256",
)


@pytest.fixture(scope="module")
def hybrid_checkpoint(toy_struct_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("hybrid")
    run_cli_in_process("fairseq-train", *tiny_training(
        toy_struct_bin, save_dir, arch="onlstm_san_transformer", extra=HYBRID_ARGS))
    return save_dir / "checkpoint_last.pt"


def load_runner(checkpoint, *options):
    args = states_cli.get_argparser().parse_args(
        ["unused.txt", "--out", "unused.npz", "--path", str(checkpoint), "--device", "cpu",
         *options]
    )
    return CheckpointEncoder(args)


def lines_of(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_dump_states_writes_every_part(hybrid_checkpoint, toy_raw, tmp_path, capsys):
    out = tmp_path / "states.npz"
    states_cli.cli_main([str(toy_raw / "test.en"), "--path", str(hybrid_checkpoint),
                         "--conllu", str(toy_raw / "test.en.conllu"), "--out", str(out),
                         "--batch-size", "3", "--device", "cpu"])
    assert f"{TOY_SIZES['test']} sentences -> {out}: " in capsys.readouterr().out
    lines = lines_of(toy_raw / "test.en")
    with np.load(out) as stored:
        assert sorted(stored.files) == ["final", "num_pieces", "recurrent", "san"]
        for part in ("recurrent", "san", "final"):
            assert stored[part].shape == (len(lines), 32) and stored[part].dtype == np.float32
            assert np.isfinite(stored[part]).all()
        assert stored["num_pieces"].tolist() == [len(line.split()) for line in lines]


def test_fairseqs_own_transformer_has_a_san_part_only(toy_data_bin, toy_raw, tmp_path):
    run_cli_in_process("fairseq-train", *tiny_training(toy_data_bin, tmp_path / "ckpt", max_update=2))
    out = tmp_path / "states.npz"
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    states_cli.cli_main([str(toy_raw / "test.en"), "--path", str(checkpoint),
                         "--out", str(out), "--device", "cpu"])
    with np.load(out) as stored:
        assert sorted(stored.files) == ["final", "num_pieces", "san"]
        # post-norm: the encoder output is the last layer's output
        np.testing.assert_array_equal(stored["san"], stored["final"])


@pytest.mark.parametrize("include_eos", [False, True])
def test_vectors_are_means_of_each_part_over_the_sentence_alone(
        hybrid_checkpoint, toy_raw, include_eos):
    runner = load_runner(hybrid_checkpoint, "--conllu", str(toy_raw / "test.en.conllu"))
    sentences = runner.prepare(lines_of(toy_raw / "test.en"), "test.en")
    vectors = states_cli.sentence_vectors(runner, sentences, batch_size=4, include_eos=include_eos)

    encoder = runner.encoder
    seen = {}
    hooks = [layer.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o))
             for name, layer in (("recurrent", encoder.recurrent_layers[-1]),
                                 ("san", encoder.layers[-1]))]
    try:
        for row, sentence in enumerate(sentences):
            out = runner.run([sentence])  # alone: no padding at all
            seen["final"] = out["encoder_out"][0]
            n = len(sentence.tokens)  # pieces + EOS, EOS last
            counted = n if include_eos else n - 1
            for part in ("recurrent", "san", "final"):
                total = torch.zeros(seen[part].size(-1), dtype=torch.float64)
                for t in range(counted):
                    total += seen[part][t, 0].double()
                np.testing.assert_allclose(vectors[part][row], (total / counted).numpy(),
                                           rtol=1e-5, atol=1e-5, err_msg=f"{part}, row {row}")
    finally:
        for hook in hooks:
            hook.remove()


def test_vectors_do_not_depend_on_batching_or_padding_side(hybrid_checkpoint, toy_raw):
    runner = load_runner(hybrid_checkpoint, "--conllu", str(toy_raw / "valid.en.conllu"))
    sentences = runner.prepare(lines_of(toy_raw / "valid.en"), "valid.en")
    assert len({len(s.tokens) for s in sentences}) > 2  # the batches really pad
    alone = states_cli.sentence_vectors(runner, sentences, batch_size=1)
    for batch_size, left_pad in ((3, True), (64, True), (64, False)):
        runner.left_pad = left_pad
        batched = states_cli.sentence_vectors(runner, sentences, batch_size=batch_size)
        for part in ("recurrent", "san", "final"):
            np.testing.assert_allclose(batched[part], alone[part], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{part}, batch {batch_size}, left_pad {left_pad}")


def test_a_structure_model_without_trees_says_how_to_give_them(hybrid_checkpoint, toy_raw,
                                                              tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        states_cli.cli_main([str(toy_raw / "test.en"), "--path", str(hybrid_checkpoint),
                             "--out", str(tmp_path / "s.npz"), "--device", "cpu"])
    message = str(exit_info.value)
    assert "uses dependency trees" in message and "--conllu" in message and "--parser" in message


def test_trees_of_other_sentences_are_refused(hybrid_checkpoint, toy_raw):
    runner = load_runner(hybrid_checkpoint, "--conllu", str(toy_raw / "valid.en.conllu"))
    with pytest.raises(StructureError, match="valid.en.conllu"):
        runner.prepare(lines_of(toy_raw / "test.en"), "test.en")


# --------------------------------------------------------------------------
# probing


def write_length_task(directory, seed=11):
    """A SentEval-style "sentence length" task on fresh toy sentences: three
    buckets of the number of words (tertiles), 400/100/100 examples; and the
    trees of its sentences."""
    examples = generate_examples(600, seed=seed)
    lengths = np.array([len(e.src) for e in examples])
    cuts = np.quantile(lengths, [1 / 3, 2 / 3])
    names = ("short", "medium", "long")
    task, trees = directory / "sentence_length.txt", directory / "sentence_length.conllu"
    with open(task, "w", encoding="utf-8") as t, open(trees, "w", encoding="utf-8") as c:
        for i, (example, length) in enumerate(zip(examples, lengths)):
            split = "tr" if i < 400 else "va" if i < 500 else "te"
            t.write(f"{split}\t{names[np.digitize(length, cuts)]}\t{' '.join(example.src)}\n")
            c.write(to_conllu(example))
    return task, trees


def majority_accuracy(task_file):
    rows = [line.split("\t") for line in lines_of(task_file)]
    most = Counter(label for split, label, _ in rows if split == "tr").most_common(1)[0][0]
    test = [label for split, label, _ in rows if split == "te"]
    return sum(label == most for label in test) / len(test)


def test_probe_on_sentence_length_beats_the_majority_baseline(hybrid_checkpoint, tmp_path, capsys):
    task, trees = write_length_task(tmp_path)
    saved = tmp_path / "states.npz"
    results = probe_cli.main(probe_cli.get_argparser().parse_args([
        str(task), "--path", str(hybrid_checkpoint), "--conllu", str(trees), "--device", "cpu",
        "--save-states", str(saved), "--json", str(tmp_path / "results.json")]))
    baseline = majority_accuracy(task)
    assert results["majority_te"] == pytest.approx(baseline)
    assert results["counts"] == {"tr": 400, "va": 100, "te": 100}
    assert sorted(results["representations"]) == ["final", "recurrent", "san"]
    for name, result in results["representations"].items():
        assert result["te"] > baseline + 0.15, (name, result, baseline)
        assert result["setting"] in probe_cli.GRIDS["logreg"]
    printed = capsys.readouterr().out
    assert "majority baseline te" in printed and "recurrent" in printed

    # the saved vectors give the same results without the model
    again = probe_cli.main(probe_cli.get_argparser().parse_args(
        [str(task), "--states", str(saved)]))
    assert again["representations"] == results["representations"]


@pytest.mark.parametrize("kind", sorted(probe_cli.GRIDS))
def test_probe_finds_a_label_the_vectors_hold(kind, tmp_path):
    # label = sign of feature 0 (the others noise); tr majority "neg", te 3/4 "neg"
    rng = np.random.default_rng(0)
    splits = ["tr"] * 120 + ["va"] * 40 + ["te"] * 40
    signs = np.concatenate([np.where(np.arange(120) < 70, -1, 1), np.tile([-1, 1], 20),
                            np.where(np.arange(40) < 30, -1, 1)])
    vectors = rng.normal(size=(200, 6)).astype(np.float32)
    vectors[:, 0] = signs * (1.0 + rng.random(200))
    task = tmp_path / "sign.txt"
    task.write_text("".join(f"{s}\t{'pos' if y > 0 else 'neg'}\tw{i}\n"
                            for i, (s, y) in enumerate(zip(splits, signs))))
    np.savez(tmp_path / "states.npz", final=vectors, num_pieces=np.ones(200, dtype=np.int64))
    results = probe_cli.main(probe_cli.get_argparser().parse_args(
        [str(task), "--states", str(tmp_path / "states.npz"), "--classifier", kind]))
    assert results["majority_te"] == 0.75
    assert results["representations"]["final"]["te"] == 1.0


@pytest.mark.parametrize("line, problem", [
    ("tr\tlabel only\n", "line 2: expected split<TAB>label<TAB>sentence"),
    ("train\tx\ta sentence\n", "line 2: split 'train' is not one of tr, va, te"),
    ("va\tx\t \n", "line 2: expected split<TAB>label<TAB>sentence"),
])
def test_malformed_probing_lines_are_named(line, problem, tmp_path):
    task = tmp_path / "task.txt"
    task.write_text("tr\ta\tone sentence\n" + line + "te\tb\tanother one\n")
    with pytest.raises(ValueError, match=f"task.txt, {problem}"):
        probe_cli.read_probing_file(str(task))


def test_a_split_without_examples_is_refused(tmp_path):
    task = tmp_path / "task.txt"
    task.write_text("tr\ta\tone\nte\tb\ttwo\n")
    with pytest.raises(ValueError, match="no example of split 'va'"):
        probe_cli.read_probing_file(str(task))


def test_states_of_other_sentences_are_refused(tmp_path):
    task = tmp_path / "task.txt"
    task.write_text("tr\ta\tone\nva\ta\ttwo\nte\tb\tthree\n")
    np.savez(tmp_path / "states.npz", final=np.zeros((4, 3), dtype=np.float32))
    with pytest.raises(SystemExit, match="has 4 rows but .*task.txt has 3 examples"):
        probe_cli.cli_main([str(task), "--states", str(tmp_path / "states.npz")])


@pytest.mark.parametrize("command", [states_cli, probe_cli])
def test_a_batch_size_below_one_is_refused_naming_the_option(command, capsys):
    arguments = ["unused.txt", "--out", "unused.npz"] if command is states_cli else ["unused.tsv"]
    with pytest.raises(SystemExit):
        command.get_argparser().parse_args([*arguments, "--path", "model.pt", "--batch-size", "0"])
    assert "argument --batch-size: must be an integer >= 1, got '0'" in capsys.readouterr().err
