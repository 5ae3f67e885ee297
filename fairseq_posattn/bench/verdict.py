"""What a benchmark run decides, read from the JSON outputs of
``fairseq-posattn-bench`` and ``fairseq-posattn-bench-recurrent`` in a folder:

    python -m fairseq_posattn.bench.verdict docs/results/benchmarks/h100/<commit>

Per output: each candidate (:mod:`..kernels.candidates`) wins by more than the
noise when its worst per-repeat ratio to its baseline (the path ``auto``
takes) is below ``1 - s``, ``s`` the baseline's own spread over the repeats,
(slowest - fastest) / median; each row of :data:`TARGETS` passes when its
ratio of the medians is at most the target; and the rows that did not run and
``posattn-off``'s repeats outside :data:`POSATTN_OFF_BAND`.
"""

import argparse
import glob
import json
import os
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from .timing import PHASES, per_repeat_ratios

# row: the most (train, infer, peak memory) may cost, x its baseline (stock; onlstm-san: stock-deep;
# ON-LSTM layer: cuDNN's nn.LSTM in float16, its stretch target train 1.20)
TARGETS = {
    **{row: (1.03, 1.05, 1.03) for row in ("P", "R", "PR", "temp", "rope", "alibi", "t5", "depdist")},
    "bilan": (1.05, 1.08, 1.05),
    "shaw": (1.08, 1.10, 1.05),
    **{row: (1.10, 1.12, 1.07) for row in ("struct", "pascal")},
    "conv1d": (1.10, 1.15, 1.10),
    "conv2d": (1.08, 1.15, 1.05),
    "onlstm-san": (1.40, 1.60, 1.20),
    "ON-LSTM layer": (1.40, 1.40, None),
}
TARGET_DTYPE = {"ON-LSTM layer": "float16"}  # a target read in one precision only
POSATTN_OFF_BAND = (0.97, 1.03)  # posattn-off computes the stock function: a repeat outside this is noise


def outside_band(ratios: Sequence[float], band: Tuple[float, float] = POSATTN_OFF_BAND) -> List[List[float]]:
    """``[repeat, ratio]`` (repeats from 1) of each ratio outside ``band``."""
    return [[repeat, ratio] for repeat, ratio in enumerate(ratios, 1) if not band[0] <= ratio <= band[1]]


def run_notes(report: dict) -> List[str]:
    """What went wrong in a run: the rows not measured, the batches the GPU
    ran out of memory at, and ``posattn-off``'s repeats outside its band."""
    lines = [f"not measured: {label}: {error}" for label, error in report.get("failed", {}).items()]
    lines += [f"B={oom['batch']} ran out of GPU memory ({oom['error']}): every row measured again at half the batch"
              for oom in report.get("out_of_memory", [])]
    outside = report.get("posattn_off_outside")
    if outside is not None:
        band = "{}-{} x stock".format(*POSATTN_OFF_BAND)
        found = "; ".join(f"{phase} " + ", ".join(f"repeat {i}: {ratio:.3f}" for i, ratio in repeats)
                          for phase, repeats in outside.items() if repeats)
        lines.append(f"posattn-off (the stock function) outside {band}: {found}" if found else
                     f"posattn-off (the stock function) within {band} in every repeat")
    return lines


def spread(times: Sequence[float]) -> float:
    """(slowest - fastest) / median of a row's own repeats."""
    return (max(times) - min(times)) / statistics.median(times)


def candidate_verdicts(report: dict) -> List[dict]:
    """Per candidate row and phase: its per-repeat ratios to its baseline, the
    baseline's own spread, and whether it wins by more than that."""
    rows = {r["label"]: r for r in report["rows"]}
    verdicts = []
    for row in report["rows"]:
        if not row.get("candidate"):
            continue
        base = rows[row["baseline"]]
        for phase in PHASES:
            ratios = per_repeat_ratios(row[f"{phase}_ms_per_repeat"], base[f"{phase}_ms_per_repeat"], digits=None)
            noise = spread(base[f"{phase}_ms_per_repeat"])
            verdicts.append({"label": row["label"], "baseline": row["baseline"], "phase": phase,
                             "range": [min(ratios), max(ratios)], "noise": noise, "wins": max(ratios) < 1 - noise})
    return verdicts


def target_rows(report: dict, dtype: str) -> List[dict]:
    """Per row of :data:`TARGETS` in ``report``: per phase and peak memory, the target, the ratio, pass or miss."""
    rows = {r["label"]: r for r in report["rows"]}
    table = []
    for label, targets in TARGETS.items():
        if label not in rows or TARGET_DTYPE.get(label, dtype) != dtype:
            continue
        row, base = rows[label], rows[rows[label]["baseline"]]
        entry = {"label": label, "baseline": row["baseline"]}
        for name, target in zip(PHASES + ("peak",), targets):
            if target is None or f"{name}_ratio" not in row:
                continue
            ratio = row[f"{name}_ratio"]
            per_repeat = (per_repeat_ratios(row[f"{name}_ms_per_repeat"], base[f"{name}_ms_per_repeat"], digits=None)
                          if name in PHASES else [ratio])
            entry[name] = {"target": target, "ratio": ratio, "range": [min(per_repeat), max(per_repeat)],
                           "passes": ratio <= target}
        table.append(entry)
    return table


def describe(report: dict) -> Tuple[str, str]:
    """A title for one output, and its precision."""
    if "config" in report:  # fairseq-posattn-bench-recurrent
        c = report["config"]
        return (f"fairseq-posattn-bench-recurrent d={c['dim']} T={c['seq_len']} B={c['batch']} "
                f"directions={c['directions']}, {c['dtype']} on {c['device']}", c["dtype"])
    s = report["settings"]
    return (f"fairseq-posattn-bench --config {s['config']} (B={s['batch']} T={s['length']}), "
            f"{report['dtype']} on {report['device']}", report["dtype"])


def _ratio(cell: Optional[dict]) -> str:
    if cell is None:
        return f"{'-':<30}"
    verdict = "pass" if cell["passes"] else "MISS"
    text = f"{cell['ratio']:.3f} ({cell['range'][0]:.2f}-{cell['range'][1]:.2f}) <= {cell['target']:.2f} {verdict}"
    return f"{text:<30}"


def format_verdict(name: str, report: dict) -> str:
    title, dtype = describe(report)
    lines = [f"== {name}: {title}"] + run_notes(report)
    verdicts = candidate_verdicts(report)
    if verdicts:
        lines.append("candidates (wins: its worst per-repeat ratio below 1 - the baseline's own spread):")
        for v in verdicts:
            lines.append(f"  {v['label'] + ' x ' + v['baseline']:<36} {v['phase']:<5} {v['range'][0]:.3f}-"
                         f"{v['range'][1]:.3f}  spread {v['noise']:.3f}  "
                         + ("wins" if v["wins"] else "does not win"))
    table = target_rows(report, dtype)
    if table:
        lines.append("targets: the ratio of the medians x the baseline (per-repeat range) <= the target")
        lines.append(f"  {'row':<28} " + " ".join(f"{name:<30}" for name in ("train", "infer", "peak memory")).rstrip())
        for entry in table:
            lines.append((f"  {entry['label'] + ' x ' + entry['baseline']:<28} "
                          + " ".join(_ratio(entry.get(name)) for name in PHASES + ("peak",))).rstrip())
        misses = [e["label"] for e in table if any(not e[n]["passes"] for n in PHASES + ("peak",) if n in e)]
        if misses:
            lines.append("misses: " + ", ".join(misses) + ("" if "config" in report else
                         " (where the time goes: PROFILE_ROWS=" + ",".join(misses)
                         + " bash scripts/gpu_check.sh OUT profile)"))
    return "\n".join(lines)


def read_outputs(folder: str) -> Tuple[Dict[str, dict], List[str]]:
    """The benchmark reports among the folder's ``*.json``, by file name, and
    the names of those written before the benchmarks kept each repeat's times."""
    reports, older = {}, []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            report = json.load(f)
        if not (isinstance(report, dict) and ("settings" in report or "config" in report) and report.get("rows")):
            continue
        if "train_ms_per_repeat" in report["rows"][0]:
            reports[os.path.basename(path)] = report
        else:
            older.append(os.path.basename(path))
    return reports, older


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m fairseq_posattn.bench.verdict",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="where the benchmarks wrote their --json outputs")
    args = parser.parse_args(argv)
    reports, older = read_outputs(args.folder)
    if not reports:
        raise SystemExit(f"{args.folder}: no JSON output of fairseq-posattn-bench or -bench-recurrent with each "
                         f"repeat's times there" + (f" ({', '.join(older)} are older)" if older else ""))
    text = "\n\n".join([format_verdict(name, report) for name, report in reports.items()]
                        + [f"skipped {name}: written before the benchmarks kept each repeat's times" for name in older])
    print(text)
    return text


if __name__ == "__main__":
    main()
