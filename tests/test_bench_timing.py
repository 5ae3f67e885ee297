"""How the benchmarks time (K consecutive calls a repeat, K calibrated, CUDA
events waited for once), driven by a stand-in clock and stand-in CUDA events
so that every figure is known; and what the verdict reads from their outputs."""

import copy
import json

import pytest
import torch

from fairseq_posattn.bench import models as bench
from fairseq_posattn.bench import recurrent, verdict
from fairseq_posattn.bench.timing import Timer

TINY = ["--batch", "3", "--length", "9", "--embed-dim", "16", "--ffn-dim", "16", "--heads", "2",
        "--layers", "1", "--vocab", "40", "--no-decode", "--no-memory"]


class Clock:
    """Seconds that pass only when a stand-in step says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Event:
    """A stand-in ``torch.cuda.Event``: records the clock, counts the host's waits."""

    waits = 0

    def __init__(self, clock, enable_timing=False):
        assert enable_timing
        self.clock, self.at = clock, None

    def record(self):
        self.at = self.clock()

    def synchronize(self):
        Event.waits += 1

    def elapsed_time(self, end):
        return 1000 * (end.at - self.at)


def events_on(clock):
    Event.waits = 0
    return lambda enable_timing=False: Event(clock, enable_timing)


def test_the_event_timer_records_around_the_calls_and_waits_once():
    clock, calls = Clock(), []

    def step():
        calls.append(clock.now)
        clock.now += 0.25

    seconds = Timer(events_on(clock)).time(step, 4)
    assert calls == [0.0, 0.25, 0.5, 0.75] and seconds == pytest.approx(1.0)
    assert Event.waits == 1


@pytest.mark.parametrize("cost, expected", [(0.03, 7), (0.045, 5), (0.25, 1), (0.0999, 3)])
def test_a_repeat_makes_the_fewest_calls_that_last_the_minimum(cost, expected):
    clock = Clock()

    def step():
        clock.now += cost

    timer = Timer(clock=clock)
    count = timer.calls_per_repeat(step, 0.2)
    assert count == expected
    assert timer.time(step, count) >= 0.2 and (count == 1 or timer.time(step, count - 1) < 0.2)


def test_a_step_too_fast_for_the_clock_is_counted_until_it_shows():
    clock, calls = Clock(), []

    def step():
        calls.append(1)
        clock.now += 0.01 if len(calls) > 3 else 0.0  # the first calls read no time

    assert Timer(clock=clock).calls_per_repeat(step, 0.05) >= 2


COSTS = {"stock": (0.03, 0.015), "P": (0.045, 0.03), "P-sdpa": (0.045, 0.03), "posattn-off": (0.0315, 0.015)}  # seconds (update, inference)


@pytest.fixture
def stand_in_steps(monkeypatch):
    """Runner's steps cost COSTS on a stand-in clock and compute nothing."""
    clock = Clock()

    def cost(phase):
        def step(runner):
            clock.now += COSTS[runner.row.label][phase]
        return step

    monkeypatch.setattr(bench.Runner, "train_step", cost(0))
    monkeypatch.setattr(bench.Runner, "infer_step", cost(1))
    return clock


def test_the_bench_times_k_updates_a_repeat_and_reports_per_update(stand_in_steps, capsys):
    settings = bench.get_parser().parse_args(TINY + ["--rows", "P,posattn-off", "--repeats", "3"])
    report = bench.run(settings, Timer(events_on(stand_in_steps)))
    rows = {r["label"]: r for r in report["rows"]}
    # K: the fewest updates lasting 200 ms, per row and phase
    assert [rows[label]["train_calls_per_repeat"] for label in ("stock", "P")] == [7, 5]
    assert [rows[label]["infer_calls_per_repeat"] for label in ("stock", "P")] == [14, 7]
    assert rows["P"]["train_ms_per_repeat"] == pytest.approx([45.0] * 3)
    assert rows["P"]["train_ms"] == pytest.approx(45.0) and rows["stock"]["infer_ms"] == pytest.approx(15.0)
    assert rows["P"]["train_ratio_per_repeat"] == [1.5] * 3 and rows["P"]["infer_ratio_per_repeat"] == [2.0] * 3
    # one wait for the device per timed block: 2 blocks to calibrate each row's phase, then 1 per repeat
    assert Event.waits == 3 * 2 * 2 + 3 * 3 * 2
    # posattn-off 5% slower than stock in training: each repeat is flagged, inference is not
    assert report["posattn_off_outside"] == {"train": [[1, 1.05], [2, 1.05], [3, 1.05]], "infer": []}
    table = bench.format_table(report)
    assert "posattn-off (the stock function) outside 0.97-1.03 x stock: train repeat 1: 1.050" in table
    assert "7/14" in table


def test_out_of_gpu_memory_measures_every_row_again_at_half_the_batch(stand_in_steps, monkeypatch):
    train = bench.Runner.train_step

    def train_or_run_out(runner):
        if runner.row.label == "P" and runner.src.size(0) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        train(runner)

    monkeypatch.setattr(bench.Runner, "train_step", train_or_run_out)
    report = bench.run(bench.get_parser().parse_args(TINY + ["--rows", "P", "--batch", "8", "--repeats", "1"]),
                       Timer(clock=stand_in_steps))
    assert report["settings"]["batch"] == 2
    assert [oom["batch"] for oom in report["out_of_memory"]] == [8, 4]
    assert report["out_of_memory"][0]["error"] == "CUDA out of memory. Tried to allocate 2.00 GiB; in the row P"
    assert [r["label"] for r in report["rows"]] == ["stock", "P"]
    assert "B=8 ran out of GPU memory" in bench.format_table(report)


def test_a_row_that_cannot_run_is_reported_and_the_others_measured(stand_in_steps, monkeypatch, tmp_path):
    train = bench.Runner.train_step

    def train_or_fail(runner):
        if runner.row.label == "P":
            raise RuntimeError("triton: no kernel image for this card\nmore")
        train(runner)

    monkeypatch.setattr(bench.Runner, "train_step", train_or_fail)
    monkeypatch.setattr(Timer, "for_device", staticmethod(lambda device: Timer(clock=stand_in_steps)))
    out = tmp_path / "bench.json"
    with pytest.raises(SystemExit, match="rows not measured: P, P-sdpa"):
        bench.main(TINY + ["--rows", "P-sdpa,posattn-off", "--repeats", "1", "--json", str(out)])
    report = json.loads(out.read_text())  # the figures of the others are written before the exit
    assert report["failed"] == {"P": "RuntimeError: triton: no kernel image for this card",
                                "P-sdpa": "its baseline P did not run"}
    assert [r["label"] for r in report["rows"]] == ["stock", "posattn-off"]


def test_the_configs_set_the_batch_and_the_flags_override_them():
    parse = bench.get_parser().parse_args
    assert (lambda s: (s.batch, s.length))(bench.resolve_config(parse([]))) == (32, 64)
    assert (lambda s: (s.batch, s.length))(bench.resolve_config(parse(["--config", "wmt"]))) == (256, 64)
    assert bench.resolve_config(parse(["--config", "wmt", "--batch", "128"])).batch == 128


@pytest.mark.parametrize("changes, persistent", [
    ({}, True), ({"unidirectional": False}, False), ({"dtype": torch.bfloat16}, False),
    ({"batch": 136}, False), ({"batch": 12}, False), ({"dim": 320}, False), ({"device": "cpu"}, False)])
def test_the_lstm_row_is_named_for_cudnn_s_persistent_kernel_where_pytorch_lets_it_run(changes, persistent):
    args = recurrent.get_parser().parse_args(["--device", "cuda", "--fp16", "--unidirectional", "--batch", "128"])
    for name, value in changes.items():
        setattr(args, name, value)
    assert recurrent.lstm_label(args) == ("nn.LSTM cuDNN persistent" if persistent else "nn.LSTM")


def test_the_recurrent_bench_runs_one_direction_with_k_calls_a_repeat(tmp_path):
    out = tmp_path / "recurrent.json"
    result = recurrent.main(["--dim", "8", "--seq-len", "5", "--batch", "8", "--repeats", "2", "--unidirectional",
                             "--fp16", "--min-repeat-ms", "2", "--json", str(out)])
    assert result["config"]["directions"] == 1 and result["config"]["dtype"] == "float16"
    rows = {r["label"]: r for r in result["rows"]}
    assert set(rows) >= {"nn.LSTM", "LSTM layer", "ON-LSTM layer"}
    assert rows["ON-LSTM layer"]["baseline"] == "nn.LSTM"
    for row in rows.values():
        for phase in ("train", "infer"):
            assert row[f"{phase}_calls_per_repeat"] >= 1 and len(row[f"{phase}_ms_per_repeat"]) == 2
    assert rows["nn.LSTM"]["params"] == sum(p.numel() for p in torch.nn.LSTM(8, 8).parameters())
    assert json.loads(out.read_text())["rows"][0]["label"] == "nn.LSTM"


def _models_report(stand_in_steps):
    report = bench.run(bench.get_parser().parse_args(TINY + ["--rows", "P,posattn-off", "--repeats", "3"]),
                       Timer(clock=stand_in_steps))
    return json.loads(json.dumps(report, default=str))  # as a JSON file holds it


def test_the_verdict_decides_each_candidate_by_its_worst_repeat_against_the_baselines_spread(stand_in_steps, tmp_path):
    report = _models_report(stand_in_steps)
    rows = {r["label"]: r for r in report["rows"]}
    rows["P"]["train_ms_per_repeat"] = [10.0, 11.0, 10.5]  # spread 1/10.5 = 0.095
    # worst repeats 0.818, 0.955, and 0.955 with one lucky repeat at 0.8
    for label, times in (("fast", [8.0, 9.0, 8.4]), ("close", [9.5, 10.5, 10.0]), ("lucky", [8.0, 10.5, 10.0])):
        row = copy.deepcopy(rows["P"])
        row.update(label=label, baseline="P", candidate="a_kernel", train_ms_per_repeat=times)
        report["rows"].append(row)
    decided = {(v["label"], v["phase"]): v for v in verdict.candidate_verdicts(report)}
    assert decided["fast", "train"]["wins"] and not decided["close", "train"]["wins"]
    assert not decided["lucky", "train"]["wins"]
    assert decided["close", "train"]["range"] == pytest.approx([0.95, 10.5 / 11.0])
    assert decided["fast", "train"]["noise"] == pytest.approx(1 / 10.5)
    (tmp_path / "bench.json").write_text(json.dumps(report))
    (tmp_path / "other.json").write_text("[1, 2]")  # not a benchmark's output: passed over
    lines = verdict.main([str(tmp_path)]).splitlines()
    assert [line.split()[-1] for line in lines if line.split()[:4] in (["fast", "x", "P", "train"],
                                                                        ["close", "x", "P", "train"])] == ["wins", "win"]


def test_the_verdict_reads_each_target_against_the_issues_table(stand_in_steps):
    report = _models_report(stand_in_steps)  # P: 1.5 x stock in training, 2.0 in inference
    (p_row,) = verdict.target_rows(report, "float32")
    assert p_row["label"] == "P" and p_row["train"]["target"] == 1.03 and p_row["infer"]["target"] == 1.05
    assert p_row["train"]["ratio"] == pytest.approx(1.5) and not p_row["train"]["passes"]
    assert "peak" not in p_row  # --no-memory
    text = verdict.format_verdict("bench.json", report)
    assert "posattn-off (the stock function) outside 0.97-1.03 x stock: train repeat 1: 1.050" in text
    assert "misses: P (where the time goes: PROFILE_ROWS=P bash scripts/gpu_check.sh OUT profile)" in text


def test_the_recurrent_target_is_read_in_float16_only():
    row = {"label": "ON-LSTM layer", "baseline": "nn.LSTM", "candidate": None, "train_ratio": 1.3, "infer_ratio": 1.5,
           "train_ms_per_repeat": [1.3, 1.2], "infer_ms_per_repeat": [1.5, 1.5]}
    lstm = {"label": "nn.LSTM", "baseline": "nn.LSTM", "candidate": None, "train_ratio": 1.0, "infer_ratio": 1.0,
            "train_ms_per_repeat": [1.0, 1.0], "infer_ms_per_repeat": [1.0, 1.0]}
    report = {"config": {}, "rows": [lstm, row]}
    (entry,) = verdict.target_rows(report, "float16")
    assert entry["train"]["passes"] and not entry["infer"]["passes"]
    assert entry["train"]["range"] == pytest.approx([1.2, 1.3])
    assert verdict.target_rows(report, "bfloat16") == []
