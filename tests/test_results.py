"""The measured tables in the docs are what their commands give for the
committed run outputs under docs/results.

* The PoS tables of docs/evaluations.md are what ``fairseq-posattn-pos-table``
  prints for docs/results/pos_tagging.
* The logical-inference table of docs/evaluations.md is what
  ``fairseq-posattn-logic-report --counts`` prints for the committed counts
  of docs/results/logic_inference.
* The Multi30k table of docs/results.md is what sacreBLEU gives for the
  committed hypothesis files (docs/results/multi30k) against the raw
  references.  Runs when MULTI30K_DIR names the directory with the raw
  Multi30k task 1 references (val.de, test_2016_flickr.de); skipped otherwise."""

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from conftest import REPO

from fairseq_posattn.evaluation import logic_inference, pos_table

REFERENCES = Path(os.environ.get("MULTI30K_DIR", "/nonexistent"))
needs_references = pytest.mark.skipif(
    not (REFERENCES / "val.de").is_file(),
    reason="set MULTI30K_DIR=<directory with the raw Multi30k val.de, test_2016_flickr.de>")

RESULTS = REPO / "docs" / "results" / "multi30k"
SECTION = re.compile(r"<!-- multi30k-ablation-table -->(.*?)<!-- end multi30k-ablation-table -->",
                     re.S)


def table_rows(text):
    """{(set, label): (run name, [score or None per seed])} of the score tables."""
    rows, current = {}, None
    for line in text.splitlines():
        heading = re.fullmatch(r"\*\*(\S+)\*\*", line.strip())
        if heading:
            current = heading[1]
        elif current and re.match(r"\| [A-Z]2? \| `", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            scores = [None if c == "–" else float(c) for c in cells[4:-1]]
            rows[current, cells[0]] = (cells[1].strip("`"), scores)
        elif line.startswith("Differences"):
            current = None
    return rows


@needs_references
def test_every_score_in_the_table_is_sacrebleus_on_the_committed_file():
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    rows = table_rows(SECTION.search(text)[1])
    assert rows
    checked = 0
    for (set_name, _), (name, scores) in rows.items():
        refs = (REFERENCES / f"{set_name}.de").read_text(encoding="utf-8").splitlines()
        for seed, score in enumerate(scores, 1):
            hyp = RESULTS / f"{name}.seed{seed}.{set_name}.hyp"
            assert (score is None) == (not hyp.exists()), hyp
            if score is not None:
                hyps = hyp.read_text(encoding="utf-8").splitlines()
                assert round(BLEU().corpus_score(hyps, [refs]).score, 2) == score, hyp
                checked += 1
    assert checked > 0


POS_SECTION = re.compile(r"<!-- pos-tagging-table -->(.*?)<!-- end pos-tagging-table -->", re.S)


def test_the_pos_tables_are_what_the_command_prints_for_the_committed_runs(capsys):
    text = (REPO / "docs" / "evaluations.md").read_text(encoding="utf-8")
    pos_table.main([str(REPO / "docs" / "results" / "pos_tagging")])
    printed = capsys.readouterr().out.strip()
    assert printed.count("### UD_") == 4
    assert POS_SECTION.search(text)[1].strip() == printed


LOGIC_SECTION = re.compile(r"<!-- logic-inference-table -->(.*?)<!-- end logic-inference-table -->", re.S)
LOGIC_RUNS = [f"logic_{arch}.seed{seed}.counts.json"
              for arch in ("san", "lstm", "onlstm", "onlstm_san") for seed in (1, 2)]


def test_the_logic_table_is_what_the_command_prints_for_the_committed_counts(capsys):
    text = (REPO / "docs" / "evaluations.md").read_text(encoding="utf-8")
    section = LOGIC_SECTION.search(text)[1].strip()
    results = REPO / "docs" / "results" / "logic_inference"
    logic_inference.cli_main(["--counts", *(str(results / name) for name in LOGIC_RUNS)])
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("| operators | examples | SAN | LSTM | ON-LSTM | ON-LSTM+SAN |")
    assert section == printed


QUICKSTART_SECTION = re.compile(r"<!-- quickstart-table -->(.*?)<!-- end quickstart-table -->", re.S)


def quickstart_figure():
    spec = importlib.util.spec_from_file_location("quickstart_figure", REPO / "scripts" / "quickstart_figure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quickstart_table_is_the_committed_runs_of_scripts_quickstart_figure():
    figure = quickstart_figure()
    records = figure.records()
    assert records, "no committed run under docs/results/quickstart"
    for path, record in zip(sorted(figure.RESULTS.glob("*.json")), records):
        assert figure.record_path(record) == path  # named as the script names it
        assert record["changed_files"] == [], path  # run from a committed checkout
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    assert QUICKSTART_SECTION.search(text)[1].strip() == figure.table(records)


def test_quickstart_figure_refuses_a_run_sh_setting_by_name(monkeypatch, capsys):
    monkeypatch.setenv("MAX_UPDATE", "3")
    with pytest.raises(SystemExit):
        quickstart_figure().main(["--threads", "1"])
    assert "unset MAX_UPDATE" in capsys.readouterr().err


def test_quickstart_figure_kernels_finds_the_ops_whose_bits_the_threads_change(monkeypatch):
    import torch
    monkeypatch.setenv("VENV", str(Path(sys.executable).parent.parent))  # this interpreter's torch
    figure = quickstart_figure()
    base = figure.kernel_bits({})
    assert figure.kernel_bits({}) == base  # the probe itself is deterministic
    threads = figure.kernel_bits({"THREADS": "2"})
    assert threads["mm over tokens"] != base["mm over tokens"]  # MKL splits the long sum between threads
    assert threads["softmax"] == base["softmax"]
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        forced = figure.kernel_bits({"ATEN_CPU_CAPABILITY": "avx2"})
        assert forced["softmax"] != base["softmax"] and forced["mm"] == base["mm"]
