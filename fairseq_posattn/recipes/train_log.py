"""What a ``fairseq-train --log-format json`` log says: its validations, and
a short summary of a run (updates, wall time, parameters, validation loss per
epoch) for the record that goes beside a run's hypotheses.

    fairseq-posattn-train-log --log train.log [--settings settings.txt] \\
        [--out summary.json]

Which lines count and how a validation gets its wall time: docs/plots.md.  A
run's wall time sums the time from each ``[recipe] fairseq-train started <time>``
marker to the last timestamp before the next one, so a run killed and resumed
is counted once, without the time it was not running.
"""

import argparse
import json
import logging
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Dict, List, Optional, Sequence

from ..files import atomic_output

logger = logging.getLogger("fairseq_posattn.train_log")

# "<time> | <LEVEL> | <tag> | {json}" as fairseq's logging writes it
RECORD = re.compile(
    r"^(?:(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| )?[A-Z]+ \| (?P<tag>[\w.-]+) \| (?P<json>\{.*)$"
)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# the key of fairseq's wall meter in the records of each training tag
WALL_KEYS = {"train_inner": "wall", "train": "train_wall"}


@dataclass
class Validation:
    """One validation record of a log."""

    line: int
    updates: int
    metrics: Dict[str, float]  # "loss", "bleu", ... (the subset prefix removed)
    time: Optional[datetime] = None  # the line's timestamp
    wall: Optional[float] = None  # seconds of training (fairseq's wall meter)
    epoch: Optional[int] = None


def _number(value) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def parse_log(lines: Sequence[str], name: str, subset: str = "valid") -> List[Validation]:
    """The ``subset`` validations of one log (its lines), in log order; ``name``
    names the log in messages.  Raises ValueError when there is none."""
    prefix = subset + "_"
    decoder = json.JSONDecoder()
    validations, anchors = [], []  # anchors: (line, time, wall) of the training records
    for number, line in enumerate(lines, 1):
        match = RECORD.match(line.rstrip("\r\n"))
        if match is None or (match["tag"] != subset and match["tag"] not in WALL_KEYS):
            continue
        tag = match["tag"]
        try:
            # raw_decode: the record may run on into another stream's output
            stats, _ = decoder.raw_decode(match["json"])
        except json.JSONDecodeError as exc:
            logger.warning("%s, line %d: skipped a '%s' record that is not valid JSON (%s)",
                           name, number, tag, exc.msg)
            continue
        time = datetime.strptime(match["time"], TIME_FORMAT) if match["time"] else None
        if tag in WALL_KEYS:
            wall = _number(stats.get(WALL_KEYS[tag]))
            if time is not None and wall is not None:
                anchors.append((number, time, wall))
            continue
        updates = _number(stats.get(prefix + "num_updates"))
        if updates is None:
            logger.warning("%s, line %d: skipped a '%s' record without %snum_updates",
                           name, number, tag, prefix)
            continue
        metrics = {
            key[len(prefix):]: value
            for key, value in ((k, _number(v)) for k, v in stats.items())
            if key.startswith(prefix) and value is not None
        }
        del metrics["num_updates"]
        wall = metrics.pop("wall", None)  # not logged by fairseq 0.12: from the training records below
        epoch = _number(stats.get("epoch"))
        validations.append(Validation(number, int(updates), metrics, time, wall,
                                      None if epoch is None else int(epoch)))
    if not validations:
        raise ValueError(
            f"{name}: no '{subset}' validation record (lines '... | {subset} | {{...}}'); "
            f"give the output of fairseq-train --log-format json that ran at least one validation"
        )
    for v in validations:
        if v.wall is None and v.time is not None and anchors:
            _, time, wall = next((a for a in anchors if a[0] > v.line), anchors[-1])
            v.wall = wall + (v.time - time).total_seconds()
    return validations


def read_log(path: str, subset: str = "valid") -> List[Validation]:
    """The validations of a training log, or of a summary of one (the JSON that
    :func:`summarize` writes; its validations are of the ``valid`` subset)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    if lines and lines[0].lstrip().startswith("{"):
        return summary_validations(json.loads("".join(lines)), path, subset)
    return parse_log(lines, path, subset)


def summary_validations(summary: Dict[str, object], name: str, subset: str) -> List[Validation]:
    """The validations a summary keeps (no log lines: ``line`` is their number)."""
    if subset != "valid":
        raise ValueError(f"{name}: a training summary keeps the 'valid' validations only")
    if not summary.get("validations"):
        raise ValueError(f"{name}: a training summary without validations")
    return [Validation(number, v["updates"], {k: v[k] for k in SUMMARY_METRICS if k in v},
                       wall=v.get("wall"), epoch=v.get("epoch"))
            for number, v in enumerate(summary["validations"], 1)]


START = re.compile(r"fairseq-train started (?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
TIMESTAMP = re.compile(r"^(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \|")
# the validation metrics a summary keeps (as the criterion logs them)
SUMMARY_METRICS = ("loss", "nll_loss", "ppl", "bleu", "accuracy", "f1", "oov_accuracy",
                   "ambiguous_accuracy")
PARAMS = re.compile(r"num\. (?:shared )?model params: (?P<count>[\d,]+)")


def training_seconds(lines: Sequence[str]) -> Optional[float]:
    """Seconds from each marked ``fairseq-train`` start to the last timestamp
    before the next one, summed; None without a start marker."""
    total, start, last = 0.0, None, None
    for line in lines:
        marker = START.search(line)
        if marker:
            if start is not None and last is not None:
                total += max(0.0, (last - start).total_seconds())
            start = last = datetime.strptime(marker["time"], TIME_FORMAT)
            continue
        stamp = TIMESTAMP.match(line)
        if stamp and start is not None:
            last = datetime.strptime(stamp["time"], TIME_FORMAT)
    if start is None:
        return None
    return total + max(0.0, (last - start).total_seconds())


def summarize(lines: Sequence[str], name: str) -> Dict[str, object]:
    """Updates, wall time, parameters and the validation metrics (with their wall
    time, where the log has it) per epoch of one log."""
    validations = parse_log(lines, name)
    params = [int(m["count"].replace(",", "")) for m in map(PARAMS.search, lines) if m]
    seconds = training_seconds(lines)
    return {
        "updates": max(v.updates for v in validations),
        "epochs": max((v.epoch for v in validations if v.epoch is not None), default=None),
        "wall_seconds": None if seconds is None else round(seconds),
        "parameters": params[-1] if params else None,
        "validations": [
            {"epoch": v.epoch, "updates": v.updates,
             **({} if v.wall is None else {"wall": round(v.wall)}),
             **{k: v.metrics[k] for k in SUMMARY_METRICS if k in v.metrics}}
            for v in validations
        ],
    }


def summary_line(summary: Dict[str, object]) -> str:
    """``"1000 updates in 2502 s; last validation: loss 4.78, nll_loss 3.41, ppl 10.6"``."""
    wall = summary["wall_seconds"]
    last = {k: v for k, v in summary["validations"][-1].items() if k not in ("epoch", "updates")}
    return (f"{summary['updates']} updates" + ("" if wall is None else f" in {wall} s")
            + "; last validation: " + ", ".join(f"{k} {v}" for k, v in last.items()))


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="fairseq-posattn-train-log",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", required=True, help="fairseq-train --log-format json output")
    parser.add_argument("--settings", help="a run's settings record (KEY=VALUE lines), included")
    parser.add_argument("--out", help="write the summary here as JSON and print one line of "
                                      "it (default: the JSON to stdout)")
    args = parser.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as f:
            summary = summarize(f.readlines(), args.log)
        if args.settings:
            with open(args.settings, encoding="utf-8") as f:
                summary = {"settings": dict(line.rstrip("\n").split("=", 1) for line in f
                                            if "=" in line), **summary}
    except (OSError, ValueError) as exc:
        sys.exit(f"fairseq-posattn-train-log: error: {exc}")
    text = json.dumps(summary, indent=1) + "\n"
    if args.out:
        with atomic_output(args.out) as f:
            f.write(text)
        print(summary_line(summary))
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    cli_main()
