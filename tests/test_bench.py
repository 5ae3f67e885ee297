"""The benchmark harness runs end to end on a tiny size and reports ratios
against the stock transformer measured in the same run (no timing asserted)."""

import functools
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fairseq_posattn.bench import checkpoint as checkpoint_bench
from fairseq_posattn.bench import collate, compiled, recurrent, verdict
from fairseq_posattn.bench import models as bench
from fairseq_posattn.bench.timing import Timer, per_repeat_ratios
from fairseq_posattn.models.from_flags import stand_in_dictionary
from fairseq_posattn.structure import (TreeInputs, batch_encoded_parent_positions, batch_piece_structure,
                                       encode_piece_tree)
from fairseq_posattn.structure.control_trees import random_projective_heads

pytestmark = pytest.mark.slow  # command lines, recipes, training

TINY = ["--batch", "3", "--length", "9", "--embed-dim", "16", "--ffn-dim", "16", "--heads", "2",
        "--layers", "1", "--vocab", "40", "--repeats", "1", "--min-repeat-ms", "0"]


def test_every_row_builds_and_runs():
    report = bench.run(bench.get_parser().parse_args(TINY + ["--no-memory"]))
    labels = [row["label"] for row in report["rows"]]
    assert labels == [row.label for row in bench.ROWS if row.by_default]
    stock = report["rows"][0]
    assert stock["train_ratio"] == 1.0 and stock["infer_ratio"] == 1.0
    by_label = {row["label"]: row for row in report["rows"]}
    # P adds heads * t * t parameters (t = 256 by default) in the first encoder layer only
    assert by_label["P"]["params"] - by_label["posattn-off"]["params"] == 2 * 256 * 256
    assert by_label["posattn-off"]["params"] == stock["params"]
    for row in report["rows"]:
        assert row["train_ms"] > 0 and row["infer_ms"] > 0
        # the encoder runs once per decoded batch (3 sentences), inside the decoding time
        assert 0 < row["decode_encoder_ms"] < 1000 * 3 / row["decode_sent_per_s"]
    # the hybrids stack K = --layers recurrent layers under --layers SAN layers and
    # are compared with a stock encoder of the same depth
    deep = by_label["stock-deep"]
    assert deep["baseline"] == "stock" and deep["params"] > stock["params"]
    for label in ("onlstm-san", "lstm-san"):
        row = by_label[label]
        assert row["baseline"] == "stock-deep"
        assert row["train_ratio"] == pytest.approx(row["train_ms"] / deep["train_ms"])


def test_memory_and_json_output(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main(TINY + ["--rows", "conv2d", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "conv2d" in printed and "x base" in printed
    report = json.loads(out.read_text())
    assert [row["label"] for row in report["rows"]] == ["stock", "conv2d"]
    for row in report["rows"]:
        assert row["peak_mb"] > 0
    assert report["rows"][0]["peak_ratio"] == 1.0


def test_rows_bring_their_baselines():
    report = bench.run(bench.get_parser().parse_args(TINY + ["--no-memory", "--rows", "onlstm-san"]))
    assert [row["label"] for row in report["rows"]] == ["stock", "stock-deep", "onlstm-san"]


def test_kernel_comparisons_run_against_the_same_model_on_the_default_kernel():
    """``P-sdpa`` is ``P`` on --encoder-attention-kernel sdpa: the same
    parameters, its ratios taken against ``P``; ``shaw-explicit`` against stock."""
    rows = "P-sdpa,bilan-sdpa,shawkeys-sdpa,shaw-explicit"
    report = bench.run(bench.get_parser().parse_args(TINY + ["--no-memory", "--rows", rows]))
    by_label = {row["label"]: row for row in report["rows"]}
    assert set(by_label) == {"stock", "P", "P-sdpa", "bilan", "bilan-sdpa", "shawkeys", "shawkeys-sdpa",
                             "shaw-explicit"}
    for label in ("P", "bilan", "shawkeys"):
        row = by_label[label + "-sdpa"]
        assert row["baseline"] == label and row["params"] == by_label[label]["params"]
        assert row["train_ratio"] == pytest.approx(row["train_ms"] / by_label[label]["train_ms"])
    assert by_label["shaw-explicit"]["baseline"] == "stock"


def test_bf16_runs_the_models_in_bfloat16_with_float32_masters(tmp_path):
    out = tmp_path / "bench.json"
    bench.main(TINY + ["--no-memory", "--rows", "onlstm-san", "--bf16", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["dtype"] == "bfloat16" and report["settings"]["half"] == "bfloat16"
    assert [row["label"] for row in report["rows"]] == ["stock", "stock-deep", "onlstm-san"]


def test_no_decode_times_training_and_inference_only(capsys):
    report = bench.main(TINY + ["--no-memory", "--rows", "P", "--no-decode", "--repeats", "2"])
    for row in report["rows"]:
        assert "decode_ratio" not in row and len(row["infer_ratio_per_repeat"]) == 2
    out = capsys.readouterr().out
    assert "infer ms" in out and "decode/s" not in out


def test_profile_reports_the_parts_of_a_hybrid(capsys):
    report = bench.main(TINY + ["--profile", "onlstm-san"])
    for part in ("phase: forward", "phase: backward", "phase: optimizer",
                 "part: encoder recurrent layers", "part: encoder SAN layers", "part: decoder",
                 "_FastONLSTMBackward", "encoder without gradients (as decoding runs it)",
                 "fairseq_posattn_onlstm::forward"):
        assert part in report
    assert report in capsys.readouterr().out
    # a row with trees: its encoder takes them in the no-grad passes too
    assert "part: encoder SAN layers" in bench.main(TINY + ["--profile", "struct"]).split("encoder without")[1]


def test_a_row_gets_the_tree_inputs_its_encoder_reads_as_training_collates_them():
    settings = bench.resolve_config(bench.get_parser().parse_args(TINY))
    dictionary = stand_in_dictionary(settings.vocab)
    struct, plain = (bench.Runner(bench.ROW_BY_LABEL[label], settings, dictionary, torch.device("cpu"))
                     for label in ("struct", "P"))
    assert plain.trees == {}
    rng = np.random.default_rng(settings.seed)
    heads = [np.asarray(random_projective_heads(n, rng)) for n in (struct.lengths - 1).tolist()]
    width = struct.src.size(1)
    depths, relative, _ = batch_piece_structure(heads, [np.arange(len(h)) for h in heads], left_pad=True,
                                                width=width)
    assert struct.trees.keys() == {"src_depths", "src_structural_positions"}
    assert torch.equal(struct.trees["src_depths"], depths)
    assert torch.equal(struct.trees["src_structural_positions"], relative)
    reads_parents = SimpleNamespace(tree_inputs=TreeInputs(parent_anchor="mean"))
    parents, _ = batch_encoded_parent_positions([encode_piece_tree(h, np.arange(len(h))) for h in heads],
                                                left_pad=True, width=width)
    trees = bench.make_trees(reads_parents, struct.lengths, width, settings.seed)
    assert trees.keys() == {"src_parent_positions"} and torch.equal(trees["src_parent_positions"], parents)


def test_unknown_row_is_refused():
    with pytest.raises(SystemExit, match="unknown --rows"):
        bench.run(bench.get_parser().parse_args(TINY + ["--rows", "nonsense"]))


def test_compile_bench_checks_that_compiled_computes_the_same(tmp_path, capsys, monkeypatch):
    """Dynamo traces and AOT autograd partitions as inductor's run does; the
    ``aot_eager`` backend skips only inductor's code generation (most of a minute)."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    out = tmp_path / "compile.json"
    (row,) = compiled.main(["--rows", "onlstm", "--embed-dim", "8", "--batches", "2", "--max-tokens", "24",
                            "--min-length", "4", "--max-length", "8", "--repeats", "1", "--json", str(out)])
    assert row["row"] == "onlstm" and row["max_abs_diff"] < 1e-5
    assert row["compiled"]["graphs"] >= 1 and row["compiled"]["graphs_after_first_pass"] == 0
    assert row["train_ratio"] == pytest.approx(row["compiled"]["train_s"] / row["eager"]["train_s"])
    assert "onlstm" in capsys.readouterr().out
    assert json.loads(out.read_text())["rows"][0]["row"] == "onlstm"


def test_compile_bench_refuses_an_unknown_row():
    with pytest.raises(SystemExit, match="unknown --rows"):
        compiled.main(["--rows", "onlstm,nope"])


def test_collate_bench_interleaves_the_collaters(capsys):
    result = collate.main(["--words", "8", "--batch", "4", "--batches", "2", "--seconds", "0.01",
                           "--rounds", "3"])
    fairseq_rates, struct_rates = result["rates"].values()
    assert len(fairseq_rates) == len(struct_rates) == 3
    assert result["ratios"] == pytest.approx([a / b for a, b in zip(struct_rates, fairseq_rates)])
    out = capsys.readouterr().out
    assert "translation_struct (src_depths, src_structural_positions) / fairseq" in out
    assert "bytes/sentence (torch.int8)" in out


def test_collate_bench_times_what_each_model_reads_side_by_side(capsys):
    result = collate.main(["--words", "8", "--batch", "4", "--batches", "2", "--seconds", "0.01", "--rounds", "2",
                           "--reads", "src_depths,src_structural_positions", "--reads", "src_parent_positions"])
    assert list(result["ratios_by_reads"]) == ["(src_depths, src_structural_positions)", "(src_parent_positions)"]
    fairseq_rates, wang_rates, parent_rates = result["rates"].values()
    assert result["ratios_by_reads"]["(src_parent_positions)"] == pytest.approx(
        [a / b for a, b in zip(parent_rates, fairseq_rates)])
    out = capsys.readouterr().out
    assert "translation_struct (src_parent_positions) / (src_depths, src_structural_positions): " in out
    assert "bytes/sentence (torch.float32)" in out
    with pytest.raises(SystemExit):
        collate.main(["--reads", "src_depths,src_heads"])


def test_per_repeat_ratios():
    times, reference = [1.0, 3.0, 2.0004, 0.2], [2.0, 2.0, 1.0, 0.3]
    assert per_repeat_ratios(times, reference) == [0.5, 1.5, 2.0, 0.667]
    assert per_repeat_ratios(times, reference, digits=None) == [a / b for a, b in zip(times, reference)]


def test_recurrent_bench_runs_every_row_in_bfloat16(capsys):
    result = recurrent.main(["--dim", "8", "--seq-len", "5", "--batch", "2", "--repeats", "1",
                             "--min-repeat-ms", "0", "--bf16"])
    assert result["config"]["dtype"] == "bfloat16"
    assert {r["label"] for r in result["rows"]} >= {"nn.LSTM", "LSTM layer", "ON-LSTM layer"}
    assert "bfloat16 cpu" in capsys.readouterr().out


def test_recurrent_bench_reports_each_rows_per_repeat_range(capsys):
    result = recurrent.main(["--dim", "8", "--seq-len", "5", "--batch", "2", "--repeats", "3",
                             "--min-repeat-ms", "0"])
    lstm = next(r for r in result["rows"] if r["label"] == "nn.LSTM")
    assert lstm["train_ratio_per_repeat"] == lstm["infer_ratio_per_repeat"] == [1.0, 1.0, 1.0]
    for row in result["rows"]:
        ratios = row["train_ratio_per_repeat"]
        assert len(ratios) == 3 and min(ratios) <= round(row["train_ratio"], 3) <= max(ratios)
    out = capsys.readouterr().out
    assert "per repeat" in out and " 1.00- 1.00 " in out.splitlines()[2]


@pytest.mark.parametrize("label, kernel", [("conv1d-triton", "conv1d_triton"),
                                           ("onlstm-san-persistent", "onlstm_persistent"),
                                           ("onlstm-san-graph", "onlstm_cuda_graphs")])
def test_a_candidates_row_puts_its_layers_on_the_candidate(label, kernel):
    """The rows of the candidates (no flag reaches them) build the model with
    every layer the candidate computes on it, the others on the flags' kernels."""
    from fairseq_posattn.models.from_flags import stand_in_dictionary

    settings = bench.get_parser().parse_args(TINY)
    model = bench.build_model(bench.ROW_BY_LABEL[label], settings, stand_in_dictionary(settings.vocab))
    kernels = {m.kernel for m in model.encoder.modules() if hasattr(m, "kernel")}
    assert kernel in kernels and kernels <= {kernel, "auto"}


def test_recurrent_bench_takes_the_candidate_kernels_and_refuses_others(capsys):
    parser = recurrent.get_parser()
    assert parser.parse_args([]).kernels == ["onlstm_persistent", "onlstm_cuda_graphs"]
    assert parser.parse_args(["--kernels", "onlstm_cuda_graphs"]).kernels == ["onlstm_cuda_graphs"]
    assert parser.parse_args(["--kernels", ""]).kernels == []
    with pytest.raises(SystemExit):
        parser.parse_args(["--kernels", "onlstm_cuda_graphs,graph"])
    assert "graph: not one of onlstm_persistent, onlstm_cuda_graphs" in capsys.readouterr().err


def test_checkpoint_bench_times_verifying_and_loading_round_by_round(tmp_path):
    import torch

    path = tmp_path / "checkpoint.pt"
    torch.save({"model": {"w": torch.zeros(100)}}, path)
    times = checkpoint_bench.time_rounds(str(path), 3)
    assert set(times) == {"verify", "torch.load"}
    assert all(len(clocks[clock]) == 3 for clocks in times.values() for clock in ("wall", "cpu"))
