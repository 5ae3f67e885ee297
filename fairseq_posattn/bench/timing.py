"""What every benchmark times and reports with: a timer of K consecutive
calls, K chosen so that a timed repeat lasts long enough to mean something,
each row's first call (a row that cannot run here is set aside, not the whole
run), the timings against a baseline's, repeat by repeat (the spread of these
ratios is the noise of the machine), and their table cells."""

import json
import math
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

PHASES = ("train", "infer")  # what a row is timed for: an update (or a training pass), and an inference


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU), so that a timer read after it covers that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Seconds of the work that consecutive calls of a step queue.

    With ``event`` (``torch.cuda.Event``; :meth:`for_device` picks it on
    CUDA) two events are recorded around the calls and the host waits once,
    for the second, so that nothing between the calls synchronizes; without,
    ``clock`` is read around them."""

    def __init__(self, event=None, clock: Callable[[], float] = time.perf_counter):
        self.event = event
        self.clock = clock

    @classmethod
    def for_device(cls, device: torch.device) -> "Timer":
        return cls(torch.cuda.Event if device.type == "cuda" else None)

    def time(self, step: Callable[[], object], count: int) -> float:
        """Seconds of ``count`` consecutive calls of ``step``."""
        if self.event is None:
            start = self.clock()
            for _ in range(count):
                step()
            return self.clock() - start
        begin, end = self.event(enable_timing=True), self.event(enable_timing=True)
        begin.record()
        for _ in range(count):
            step()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1000

    def calls_per_repeat(self, step: Callable[[], object], min_seconds: float) -> int:
        """K: the fewest consecutive calls of ``step`` found to last at least
        ``min_seconds`` (K calls are timed, K scaled up by the shortfall, until they do)."""
        count = 1
        while True:
            seconds = self.time(step, count)
            if seconds >= min_seconds:
                return count
            count = max(count + 1, math.ceil(count * min_seconds / seconds)) if seconds > 0 else 2 * count


def first_calls(rows: Dict[str, Callable[[], object]], baselines: Dict[str, str]) -> Tuple[Dict[str, object], Dict[str, str]]:
    """Call each row's first call (its build and warm-up), in order: what each
    returned, and why each row that did not run did not: its call raised (a
    Triton kernel that does not compile on this card, say; the error's first
    line), or its baseline (``baselines[label]``, a row before it) did not run.
    Running out of GPU memory is raised, the row named, for the caller to shrink the batch."""
    results, failed = {}, {}
    for label, call in rows.items():
        if baselines[label] in failed:
            failed[label] = f"its baseline {baselines[label]} did not run"
            continue
        try:
            results[label] = call()
        except torch.OutOfMemoryError as error:
            error.add_note(f"in the row {label}")
            raise
        except Exception as error:  # noqa: BLE001 -- reported with the figures, the other rows still measured
            failed[label] = f"{type(error).__name__}: {error}".splitlines()[0]
    return results, failed


def interleaved(steps: Dict[str, Dict[str, Callable[[], object]]], repeats: int, min_seconds: float, timer: Timer,
                after_train: Optional[Callable[[str], object]] = None) -> Tuple[Dict, Dict]:
    """Time ``steps`` (label: phase: step): K per row and phase, the fewest
    calls that last ``min_seconds``; then in each repeat, row after row, each
    phase's K calls (``after_train(label)`` between a row's phases, untimed).
    Returns K (label: phase: K) and the seconds per call (phase: label: one per repeat)."""
    calls = {label: {phase: timer.calls_per_repeat(step, min_seconds) for phase, step in phases.items()}
             for label, phases in steps.items()}
    times = {phase: {label: [] for label in steps} for phase in PHASES}
    for _ in range(repeats):
        for label, phases in steps.items():
            for phase, step in phases.items():
                count = calls[label][phase]
                times[phase][label].append(timer.time(step, count) / count)
                if phase == "train" and after_train is not None:
                    after_train(label)
    return calls, times


def per_repeat_ratios(times: Sequence[float], reference: Sequence[float], digits: Optional[int] = 3) -> List[float]:
    """Each repeat's ratio of ``times`` to ``reference``'s run in the same repeat (rounded to ``digits``; None: unrounded)."""
    return [a / b if digits is None else round(a / b, digits) for a, b in zip(times, reference)]


def phase_figures(phase: str, times: Sequence[float], reference: Sequence[float], calls: int) -> Dict[str, object]:
    """A row's figures for ``phase`` (seconds per call, each repeat) against its baseline's
    in the same repeats: the median, the ratio of the medians, each repeat's ratio and time, K."""
    median = statistics.median(times)
    return {f"{phase}_ms": 1000 * median,
            f"{phase}_ratio": median / statistics.median(reference),
            f"{phase}_ratio_per_repeat": per_repeat_ratios(times, reference),
            f"{phase}_ms_per_repeat": [1000 * t for t in times],
            f"{phase}_calls_per_repeat": calls}


TIME_COLUMNS = (f"{'train ms':>9} {'x base':>7} {'per repeat':>11} {'infer ms':>9} {'x base':>7} {'per repeat':>11} "
                f"{'K':>7}")


def time_cells(row: dict) -> str:
    """The :data:`TIME_COLUMNS` of a row of :func:`phase_figures` (K: train/infer)."""
    cells = []
    for phase in PHASES:
        ratios = row[f"{phase}_ratio_per_repeat"]
        cells.append(f"{row[phase + '_ms']:9.2f} {row[phase + '_ratio']:7.2f} {min(ratios):5.2f}-{max(ratios):5.2f}")
    calls = f"{row['train_calls_per_repeat']}/{row['infer_calls_per_repeat']}"
    return " ".join(cells) + f" {calls:>7}"


def add_timing_arguments(parser, repeats: int, calls: str) -> None:
    """``--repeats``, ``--min-repeat-ms`` and ``--json``."""
    parser.add_argument("--repeats", type=int, default=repeats, help="timed repeats per row, the rows interleaved")
    parser.add_argument("--min-repeat-ms", type=float, default=200.0,
                        help=f"a repeat times K consecutive {calls}, K the fewest that last this long, found once "
                             "per row; the figures are per call")
    parser.add_argument("--json", default="", help="also write the report here")


def add_precision_arguments(parser, dest: str, default, what: str) -> None:
    """``--fp16`` and ``--bf16``, each setting ``dest`` to its dtype; ``what`` is their help, formatted with
    the dtype's name and the flag."""
    precision = parser.add_mutually_exclusive_group()
    for flag, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        precision.add_argument(f"--{flag}", dest=dest, action="store_const", const=dtype, default=default,
                               help=what.format(str(dtype).replace("torch.", ""), flag))


def write_json(path: str, report) -> None:
    with open(path, "w") as out:
        json.dump(report, out, indent=1)


def finish(report: dict, table: str, path: str) -> dict:
    """Print ``table``, write ``report`` to ``path`` (if given); exit with an error if rows did not run."""
    print(table)
    if path:
        write_json(path, report)
        print(f"wrote {path}", file=sys.stderr)
    if report["failed"]:
        raise SystemExit(f"rows not measured: {', '.join(report['failed'])}")
    return report


def console_script(main: Callable) -> Callable:
    """``main`` as a console script, its return value dropped (setuptools would exit with it)."""
    def cli_main(argv: Optional[Sequence[str]] = None) -> None:
        main(argv)
    return cli_main
