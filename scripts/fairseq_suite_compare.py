"""fairseq's tests without and with the plugin, from pytest's two JUnit reports
(scripts/fairseq_suite.sh writes them):

    python scripts/fairseq_suite_compare.py without.xml with.xml OUT_DIR

writes OUT_DIR/comparison.md (the counts, every test whose outcome differs,
every failure with the plugin, each with the last line of its failure) and
OUT_DIR/outcomes.tsv (test, outcome without, outcome with)."""

import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcomes(path):
    """{test id: (outcome, the last line of its failure or skip message)}"""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                summary = (node.get("message") or "").strip()
                if not summary or summary.startswith("[+"):  # pytest's pointer to the text
                    lines = [line for line in (node.text or "").splitlines() if line.strip()]
                    summary = lines[-1].strip() if lines else ""
                message = summary.splitlines()[-1][:160] if summary else ""
        found[name] = (outcome, message.replace("|", "/"))
    return found


def main(without_xml, with_xml, out):
    without, with_plugin = outcomes(without_xml), outcomes(with_xml)
    names = sorted(without.keys() | with_plugin.keys())
    absent = ("absent", "")
    lines = ["| run | passed | failed | skipped |", "|---|---:|---:|---:|"]
    for label, runs in (("without the plugin", without), ("with the plugin", with_plugin)):
        counts = Counter(outcome for outcome, _ in runs.values())
        lines.append(f"| {label} | {counts['passed']} | {counts['failed']} | {counts['skipped']} |")
    changed = [n for n in names if without.get(n, absent)[0] != with_plugin.get(n, absent)[0]]
    lines += ["", f"{len(changed)} tests change outcome:", "",
              "| test | without | with | without: last line of the failure |", "|---|---|---|---|"]
    lines += [f"| `{n}` | {without.get(n, absent)[0]} | {with_plugin.get(n, absent)[0]} | "
              f"{without.get(n, absent)[1]} |" for n in changed]
    failing = [n for n in names if with_plugin.get(n, absent)[0] == "failed"]
    lines += ["", f"{len(failing)} tests fail with the plugin:", "",
              "| test | last line of the failure |", "|---|---|"]
    lines += [f"| `{n}` | {with_plugin[n][1]} |" for n in failing]
    with open(os.path.join(out, "comparison.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "outcomes.tsv"), "w", encoding="utf-8") as f:
        f.write("test\twithout\twith\n")
        f.writelines(f"{n}\t{without.get(n, absent)[0]}\t{with_plugin.get(n, absent)[0]}\n" for n in names)
    print("\n".join(lines[:4]) + f"\n{len(changed)} change outcome, {len(failing)} fail with the plugin")


if __name__ == "__main__":
    main(*sys.argv[1:4])
