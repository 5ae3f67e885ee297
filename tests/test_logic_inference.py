"""Logical inference (Hao et al. 2019, Fig. 1; Bowman et al. 2015 data):
the ``logic_inference`` task, the ``sentence_pair_classifier`` archs and
the accuracy-by-operators command, on tiny files written here."""

import json
import random
import re

import pytest
import torch
from conftest import COMMON_ARGS, USER_DIR, run_cli
from fairseq import options, tasks
from fairseq.data import data_utils

from fairseq_posattn.evaluation.logic_inference import cli_main as table_command
from fairseq_posattn.models.pair_classifier import LOGIC_ROWS
from fairseq_posattn.modules.pooling import masked_max, masked_mean
from fairseq_posattn.tasks.logic_inference import RELATIONS, read_examples

TRAIN_MAX = 3


def formula(rng, operators):
    """A random formula in Bowman et al.'s bracketing with ``operators`` operators."""
    if operators == 0:
        return rng.choice("abcdef")
    if rng.random() < 0.3:
        return f"( not {formula(rng, operators - 1)} )"
    left = rng.randint(0, operators - 1)
    return (f"( {formula(rng, left)} ( {rng.choice(['and', 'or'])} "
            f"{formula(rng, operators - 1 - left)} ) )")


def write_logic_data(directory, train_lines=40, test_lines=6, seed=1):
    """train0..train3 and test0..test12 in Bowman et al.'s format (random labels)."""
    rng = random.Random(seed)
    for prefix, files, lines in (("train", range(TRAIN_MAX + 1), train_lines),
                                 ("test", range(13), test_lines)):
        for k in files:
            rows = [f"{rng.choice(RELATIONS)}\t{formula(rng, k)}\t{formula(rng, rng.randint(0, k))}"
                    for _ in range(lines)]
            (directory / f"{prefix}{k}").write_text("\n".join(rows) + "\n")
    return directory


@pytest.fixture(scope="module")
def logic_data(tmp_path_factory):
    return write_logic_data(tmp_path_factory.mktemp("logic"))


def build(data, arch, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--user-dir", str(USER_DIR), "--task", "logic_inference",
        "--max-train-operators", str(TRAIN_MAX), "--arch", arch, "--encoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", *extra,
    ])
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def test_pooling_matches_loops():
    torch.manual_seed(0)
    states = torch.randn(3, 5, 4)
    # no padding, left padding, pads anywhere
    mask = torch.tensor([[0, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 0, 1, 0]], dtype=torch.bool)
    for b in range(3):
        rows = [states[b, t] for t in range(5) if not mask[b, t]]
        n = len(rows)
        expected_max = [max(float(r[c]) for r in rows) for c in range(4)]
        expected_mean = [sum(float(r[c]) for r in rows) / n for c in range(4)]
        assert masked_max(states, mask)[b].tolist() == pytest.approx(expected_max)
        assert masked_mean(states, mask)[b].tolist() == pytest.approx(expected_mean)


def test_reader_names_file_and_line(tmp_path):
    path = tmp_path / "train0"
    path.write_text("#\ta\tb\n=\ta\n")
    with pytest.raises(ValueError, match=r"train0, line 2: expected 3 tab-separated fields"):
        read_examples(str(path))
    path.write_text("#\ta\tb\n\nX\ta\tb\n")
    with pytest.raises(ValueError, match=r"train0, line 3: unknown relation 'X'"):
        read_examples(str(path))
    path.write_text("#\ta\t \n")
    with pytest.raises(ValueError, match=r"line 1: empty formula"):
        read_examples(str(path))


def test_splits(logic_data):
    task, _ = build(logic_data, "logic_san")
    lines = [e for k in range(TRAIN_MAX + 1) for e in read_examples(str(logic_data / f"train{k}"))]
    every = task.cfg.valid_every
    assert task.split_examples("valid") == lines[every - 1::every]
    train = task.split_examples("train")
    assert len(train) + len(task.split_examples("valid")) == len(lines)
    assert all(e in lines for e in train[:10])
    assert task.split_examples("test7") == read_examples(str(logic_data / "test7"))
    assert len(task.split_examples("test")) == 13 * 6
    with pytest.raises(ValueError, match="no split 'test13'"):
        task.split_examples("test13")
    # the dictionary holds the training symbols and nothing else
    symbols = {t for _, p, h in lines for t in p + h}
    assert {task.dictionary[i] for i in range(task.dictionary.nspecial, len(task.dictionary))} == symbols
    assert [task.label_name(c) for c in range(task.num_classes())] == list(RELATIONS)


@pytest.mark.parametrize("arch", sorted(LOGIC_ROWS))
def test_outputs_do_not_depend_on_padding_or_batch(logic_data, arch):
    torch.manual_seed(0)
    task, model = build(logic_data, arch)
    model.eval()
    examples = task.split_examples("test")[::7][:6]
    encode = [(task.dictionary.encode_line(" ".join(p), add_if_not_exist=False, append_eos=False).long(),
               task.dictionary.encode_line(" ".join(h), add_if_not_exist=False, append_eos=False).long())
              for _, p, h in examples]
    pad = task.dictionary.pad()
    with torch.no_grad():
        for left_pad in (False, True):
            batch, _ = model(
                data_utils.collate_tokens([p for p, _ in encode], pad, left_pad=left_pad),
                data_utils.collate_tokens([h for _, h in encode], pad, left_pad=left_pad),
            )
            for i, (p, h) in enumerate(encode):
                alone, _ = model(p[None], h[None])
                torch.testing.assert_close(batch[i], alone[0], rtol=1e-5, atol=1e-5)


def accuracy(stdout):
    return float(re.search(r"\| accuracy ([0-9.]+)", stdout).group(1))


@pytest.mark.slow
def test_train_validate_and_table(logic_data, tmp_path, capsys):
    """fairseq-train the hybrid, fairseq-validate one split, the table and plot
    command: its entry for 3 operators equals fairseq-validate's accuracy."""
    save_dir = tmp_path / "hybrid"
    run_cli(
        "fairseq-train", logic_data, "--user-dir", USER_DIR, "--task", "logic_inference",
        "--max-train-operators", str(TRAIN_MAX), "--arch", "logic_onlstm_san",
        "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--criterion", "sentence_prediction",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16", "--max-update", "6",
        "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric",
        "--save-dir", save_dir, "--no-progress-bar", *COMMON_ARGS,
    )
    checkpoint = save_dir / "checkpoint_best.pt"
    validate = run_cli(
        "fairseq-validate", logic_data, "--user-dir", USER_DIR, "--task", "logic_inference",
        "--criterion", "sentence_prediction", "--path", checkpoint,
        "--valid-subset", "test3", "--batch-size", "4", *COMMON_ARGS,
    )
    figure = tmp_path / "figure.png"
    table_command([str(logic_data), "--checkpoint", f"Hybrid={checkpoint}",
                   "--checkpoint", f"Again={checkpoint}", "--plot", str(figure)])
    table = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): [float(c) for c in line.split("|")[2:-1]]
            for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| operators")}
    assert [k for k in rows if k.isdigit()] == [str(k) for k in range(1, 13)]
    assert set(rows) - set(map(str, range(1, 13))) == {"1-3 (seen)", "4-12 (unseen)"}
    assert rows["4-12 (unseen)"][0] == 9 * 6
    examples, hybrid, again = rows["3"]
    assert examples == 6 and hybrid == again
    assert hybrid == pytest.approx(accuracy(validate.stderr + validate.stdout), abs=0.051)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # one name twice: two seeds of a model, their mean and each; the counts
    # saved and read back give the same table without the checkpoints
    counts = tmp_path / "counts.json"
    table_command([str(logic_data), "--checkpoint", f"Hybrid={checkpoint}",
                   "--checkpoint", f"Hybrid={checkpoint}", "--counts-out", str(counts)])
    seeds_table = capsys.readouterr().out
    row3 = next(line for line in seeds_table.splitlines() if line.startswith("| 3 |"))
    assert row3 == f"| 3 | 6 | {hybrid:.1f} ({hybrid:.1f} / {hybrid:.1f}) |"
    table_command(["--counts", str(counts), "--plot", str(tmp_path / "again.png")])
    assert capsys.readouterr().out == seeds_table
    assert (tmp_path / "again.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # one counts file per run, as the recipe saves them: merged, the same table
    saved = json.loads(counts.read_text())
    run_files = []
    for seed, run in enumerate(saved["models"]["Hybrid"], 1):
        run_files.append(tmp_path / f"hybrid.seed{seed}.json")
        run_files[-1].write_text(json.dumps({"train_max": saved["train_max"], "models": {"Hybrid": [run]}}))
    table_command(["--counts", *map(str, run_files)])
    assert capsys.readouterr().out == seeds_table
    # runs trained on other operator counts are not put in one table
    run_files[1].write_text(json.dumps({"train_max": saved["train_max"] + 1,
                                        "models": {"Hybrid": [saved["models"]["Hybrid"][1]]}}))
    with pytest.raises(SystemExit, match="different --max-train-operators"):
        table_command(["--counts", *map(str, run_files)])
