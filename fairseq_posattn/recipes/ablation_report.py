"""An ablation over seeds from its committed outputs: BLEU per row and seed,
mean ± standard deviation, the differences that matter with a paired test per
seed, and a learning-curve figure per row.

    fairseq-posattn-ablation-report --results docs/results/multi30k \\
        --references ../multi30k --lang de --sets val --seeds 1 2 3 \\
        --row A=transformer --row B=transformer_struct --difference B-A

``--results`` holds each run's detokenized hypotheses ``NAME.seedN.SET.hyp``
and training summary ``NAME.seedN.train.json`` (the recipes' ``EXPORT_DIR``);
every score is sacreBLEU's against the raw references ``SET.LANG``.  The paired
tests are sacreBLEU's bootstrap resampling (Koehn 2004) or approximate
randomisation (Riezler & Maxwell 2005).  Missing runs are reported as missing.
"""

import argparse
import json
import logging
import os
import statistics
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from sacrebleu.metrics import BLEU

from ..errors import UserError
from ..files import atomic_output, read_lines
from ..metrics import format_mean_std, mean_std


class ReportError(UserError, ValueError):
    pass


def parse_row(text: str) -> Tuple[str, str]:
    label, sep, name = text.partition("=")
    if not sep or not label or not name:
        raise argparse.ArgumentTypeError(f"--row {text!r}: give LABEL=NAME, e.g. A=transformer")
    return label, name


def parse_difference(text: str) -> Tuple[str, str]:
    x, sep, y = text.partition("-")
    if not sep or not x or not y:
        raise argparse.ArgumentTypeError(f"--difference {text!r}: give X-Y, e.g. C-B")
    return x, y


def run_file(results: str, name: str, seed: int, what: str) -> Optional[str]:
    """The path of a run's file, None when the run has none."""
    path = os.path.join(results, f"{name}.seed{seed}.{what}")
    return path if os.path.exists(path) else None


def load_hypotheses(path: str, set_name: str, refs: Sequence[str]) -> List[str]:
    hyps = read_lines(path)
    if len(hyps) != len(refs):
        raise ReportError(f"{path} has {len(hyps)} lines but the reference of {set_name} has "
                          f"{len(refs)}: it must hold one hypothesis per reference line, in order")
    return hyps


def paired_test(baseline: Sequence[str], system: Sequence[str], refs: Sequence[str],
                test: str) -> float:
    """sacreBLEU's paired test of ``system`` against ``baseline``: the p-value."""
    from sacrebleu.significance import PairedTest

    result = PairedTest([("baseline", list(baseline)), ("system", list(system))],
                        {"BLEU": BLEU()}, [list(refs)], test_type=test, n_samples=0)()
    return result[1]["BLEU"][1].p_value


def collect(args) -> Dict[str, object]:
    """Scores, summaries and paired tests of every row, seed and set."""
    rows = dict(args.row)
    for pair in args.difference:
        for label in pair:
            if label not in rows:
                raise ReportError(f"--difference {'-'.join(pair)}: no --row {label}=NAME")
    refs = {s: read_lines(os.path.join(args.references, f"{s}.{args.lang}")) for s in args.sets}
    metric, hyps, bleu, runs = BLEU(), {}, {}, {}
    for label, name in rows.items():
        for seed in args.seeds:
            summary = run_file(args.results, name, seed, "train.json")
            if summary:
                with open(summary, encoding="utf-8") as f:
                    runs[label, seed] = json.load(f)
            for set_name in args.sets:
                path = run_file(args.results, name, seed, f"{set_name}.hyp")
                if path:
                    h = hyps[label, seed, set_name] = load_hypotheses(path, set_name, refs[set_name])
                    bleu[label, seed, set_name] = metric.corpus_score(h, [refs[set_name]]).score
    tests = {}
    for x, y in args.difference:
        for seed in args.seeds:
            for set_name in args.sets:
                if (x, seed, set_name) in hyps and (y, seed, set_name) in hyps:
                    tests[x, y, seed, set_name] = paired_test(
                        hyps[y, seed, set_name], hyps[x, seed, set_name], refs[set_name], args.test)
    return {"rows": rows, "bleu": bleu, "runs": runs, "tests": tests,
            "signature": str(metric.get_signature()) if bleu else "nothing scored yet"}


def _fmt(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(args, data: Dict[str, object]) -> str:
    rows, bleu, runs, tests = data["rows"], data["bleu"], data["runs"], data["tests"]
    seeds = [f"seed {s}" for s in args.seeds]
    lines = [f"sacreBLEU (detokenized hypotheses against the raw references; "
             f"{data['signature']}); mean ± sample standard deviation over the seeds "
             f"that have hypotheses; – = not run.", ""]
    for set_name in args.sets:
        lines += [f"**{set_name}**", "", _row("row", "run", "params", "min/run", *seeds, "mean ± std"),
                  "|---|---|---:|---:|" + "---:|" * len(seeds) + "---:|"]
        for label, name in rows.items():
            scores = [bleu.get((label, s, set_name)) for s in args.seeds]
            summaries = [runs[label, s] for s in args.seeds if (label, s) in runs]
            params = {r.get("parameters") for r in summaries} - {None}
            minutes = [r["wall_seconds"] / 60 for r in summaries if r.get("wall_seconds")]
            lines.append(_row(label, f"`{name}`",
                              f"{params.pop() / 1e6:.2f}M" if len(params) == 1 else "–",
                              f"{statistics.fmean(minutes):.0f}" if minutes else "–",
                              *map(_fmt, scores), format_mean_std([s for s in scores if s is not None])))
        lines.append("")
    if args.difference:
        lines += [f"Differences X − Y per seed, with sacreBLEU's paired "
                  f"{'bootstrap resampling' if args.test == 'bs' else 'approximate randomisation'}"
                  f" p-value of X against Y in brackets; the mean ± std of the per-seed "
                  f"differences; and the seed std of each of the two rows, the variation "
                  f"between seeds that a difference must exceed to mean something.", "",
                  _row("difference", "set", *seeds, "mean ± std", "seed std (X, Y)"),
                  "|---|---|" + "---:|" * len(seeds) + "---:|---:|"]
        for x, y in args.difference:
            for set_name in args.sets:
                diffs, cells = [], []
                for s in args.seeds:
                    if (x, s, set_name) in bleu and (y, s, set_name) in bleu:
                        diffs.append(bleu[x, s, set_name] - bleu[y, s, set_name])
                        cells.append(f"{diffs[-1]:+.2f} (p = {tests[x, y, s, set_name]:.3f})")
                    else:
                        cells.append("–")
                spread = [mean_std([bleu[r, s, set_name] for s in args.seeds
                                    if (r, s, set_name) in bleu])[1] for r in (x, y)]
                lines.append(_row(f"{x} − {y}", set_name, *cells, format_mean_std(diffs, sign=True),
                                  ", ".join(_fmt(v) for v in spread)))
        lines.append("")
    return "\n".join(lines)


def plot(args, data: Dict[str, object], out: str) -> None:
    """Validation loss against updates, a panel per row, a line per seed."""
    from ..figures import label_panel, panel_grid, plt

    rows = list(data["rows"].items())
    fig, axes = panel_grid(len(rows), 3, (4.2, 3.2), sharex=True, sharey=True)
    for ax, (label, name) in zip(axes, rows):
        for seed in args.seeds:
            summary = data["runs"].get((label, seed))
            if summary:
                points = [(v["updates"], v["loss"]) for v in summary["validations"]]
                ax.plot(*zip(*points), marker="o", markersize=3, label=f"seed {seed}")
        label_panel(ax, f"{label}: {name}", "updates", "validation loss", "not run")
    fig.savefig(out, dpi=100)
    plt.close(fig)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-posattn-ablation-report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True,
                   help="directory of NAME.seedN.SET.hyp and NAME.seedN.train.json files")
    p.add_argument("--references", required=True, help="directory of the raw SET.LANG references")
    p.add_argument("--lang", required=True, help="target language: the references' suffix")
    p.add_argument("--sets", nargs="+", required=True, help="evaluation sets, e.g. val test")
    p.add_argument("--seeds", nargs="+", type=int, required=True)
    p.add_argument("--row", type=parse_row, action="append", required=True,
                   help="LABEL=NAME, repeatable, in table order (NAME: the recipe's run name)")
    p.add_argument("--difference", action="append", default=[],
                   type=parse_difference,
                   help="X-Y: row X minus row Y per seed with a paired test; repeatable")
    p.add_argument("--test", choices=["bs", "ar"], default="bs",
                   help="paired bootstrap (bs, 1000 resamples) or approximate randomisation "
                        "(ar, 10000 trials)")
    p.add_argument("--markdown", help="write the tables here (default: stdout)")
    p.add_argument("--figure", help="write the learning curves here (PNG)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    args = get_parser().parse_args(argv)
    for chatty in ("sacrebleu", "matplotlib"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        data = collect(args)
        text = markdown(args, data)
        if args.figure:
            plot(args, data, args.figure)
    except (ReportError, OSError) as exc:
        sys.exit(f"fairseq-posattn-ablation-report: error: {exc}")
    if args.markdown:
        with atomic_output(args.markdown) as f:
            f.write(text)
    else:
        print(text)
    return data


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """The console script: :func:`main` without its return value."""
    main(argv)


if __name__ == "__main__":
    cli_main()
