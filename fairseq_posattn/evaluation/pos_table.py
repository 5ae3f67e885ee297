"""Mean +- standard deviation over seeds of the test accuracies that
examples/pos_tagging/run.sh wrote, one Markdown table per treebank::

    fairseq-posattn-pos-table examples/pos_tagging/work

reads ``WORK/<treebank>/<variant>/seed<N>/test.json`` (written by
``fairseq-posattn-pos-score --json``).  The standard
deviation is the sample one (n - 1); a single seed shows none.
"""

import argparse
import json
import sys
from pathlib import Path

from ..metrics import format_mean_std

# the row order of Dufter et al. (2020), Table 2
VARIANT_ORDER = ["san", "pe_con", "pe_add", "p", "r", "pr", "temp", "conv1d", "conv2d"]
LABELS = {"san": "SAN", "pe_con": "SAN+PE[con]", "pe_add": "SAN+PE[add]", "p": "SAN+P",
          "r": "SAN+R", "pr": "SAN+P+R", "temp": "SAN+PE[add]+Temp",
          "conv1d": "SAN+PE[add]+Conv", "conv2d": "SAN+PE[add]+Conv2d"}
METRICS = [("accuracy", "all"), ("oov_accuracy", "OOV"), ("ambiguous_accuracy", "ambiguous")]


def treebank_table(directory: Path) -> str:
    results = {}
    for path in sorted(directory.glob("*/seed*/test.json")):
        results.setdefault(path.parent.parent.name, []).append(json.loads(path.read_text()))
    variants = sorted(results, key=lambda v: (VARIANT_ORDER.index(v)
                                              if v in VARIANT_ORDER else len(VARIANT_ORDER), v))
    first = next(iter(results.values()))[0]
    lines = [f"### {directory.name} (test: {first['words']} words, {first['oov']} OOV, "
             f"{first['ambiguous']} ambiguous)", "",
             "| model | seeds | " + " | ".join(name for _, name in METRICS) + " |",
             "|---|---:|" + "---:|" * len(METRICS)]
    for variant in variants:
        runs = results[variant]
        cells = [format_mean_std([run[key] for run in runs]) for key, _ in METRICS]
        label = LABELS.get(variant, variant)
        lines.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-posattn-pos-table",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="the WORK directory of run.sh")
    args = parser.parse_args(argv)
    treebanks = sorted({p.parents[2] for p in args.work.glob("*/*/seed*/test.json")})
    if not treebanks:
        sys.exit(f"fairseq-posattn-pos-table: error: no */*/seed*/test.json under {args.work}")
    print("\n\n".join(treebank_table(t) for t in treebanks))


if __name__ == "__main__":
    main()
