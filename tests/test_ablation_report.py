"""fairseq-posattn-ablation-report: scores the committed hypothesis files with
sacreBLEU, aggregates over seeds, tests differences per seed, plots curves."""

import json
import random
import re
import statistics

import pytest
import sacrebleu
from PIL import Image

from fairseq_posattn.recipes import ablation_report

WORDS = "a man in a red shirt is riding a bike down the street with two dogs".split()


def sentence(rng, n=12):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def degrade(line, rng, rate):
    return " ".join(w if rng.random() > rate else "xyz" for w in line.split())


@pytest.fixture
def ablation(tmp_path):
    """Raw references of two sets; rows A (bad), B and C (better, as good as
    each other) with seeds 1 and 2 (B seed 2 missing) and their training summaries."""
    rng = random.Random(0)
    refs_dir, results = tmp_path / "refs", tmp_path / "results"
    refs_dir.mkdir()
    results.mkdir()
    refs = {s: [sentence(rng) for _ in range(60)] for s in ("val", "test")}
    for s, lines in refs.items():
        (refs_dir / f"{s}.de").write_text("".join(l + "\n" for l in lines))
    hyps = {}
    for name, rate, seeds in (("base", 0.5, (1, 2)), ("better", 0.1, (1,)), ("same", 0.1, (1, 2))):
        for seed in seeds:
            for s, lines in refs.items():
                h = [degrade(l, rng, rate) for l in lines]
                hyps[name, seed, s] = h
                (results / f"{name}.seed{seed}.{s}.hyp").write_text("".join(l + "\n" for l in h))
            (results / f"{name}.seed{seed}.train.json").write_text(json.dumps({
                "updates": 30, "wall_seconds": 120 * seed, "parameters": 1_500_000,
                "validations": [{"epoch": e, "updates": 10 * e, "loss": 9 - e - seed / 10}
                                for e in (1, 2, 3)]}))
    return tmp_path, refs, hyps


def report(tmp_path, *extra):
    out, figure = tmp_path / "report.md", tmp_path / "curves.png"
    data = ablation_report.main([
        "--results", str(tmp_path / "results"), "--references", str(tmp_path / "refs"),
        "--lang", "de", "--sets", "val", "test", "--seeds", "1", "2",
        "--row", "A=base", "--row", "B=better", "--row", "C=same",
        "--difference", "B-A", "--difference", "C-B", "--markdown", str(out),
        "--figure", str(figure), *extra])
    return data, out.read_text(), figure


def test_scores_means_and_differences_are_sacrebleus(ablation):
    tmp_path, refs, hyps = ablation
    data, text, figure = report(tmp_path)
    bleu = {k: sacrebleu.corpus_bleu(h, [refs[k[2]]]).score for k, h in hyps.items()}
    for (name, seed, s), score in bleu.items():
        label = {"base": "A", "better": "B", "same": "C"}[name]
        assert data["bleu"][label, seed, s] == pytest.approx(score, abs=1e-9)
    # the table: every seed's score and the mean ± sample std, '–' where not run
    a_test = [bleu["base", 1, "test"], bleu["base", 2, "test"]]
    row = next(l for l in text.split("**test**")[1].splitlines() if l.startswith("| A |"))
    assert f"{a_test[0]:.2f} | {a_test[1]:.2f} | {statistics.mean(a_test):.2f} ± " \
           f"{statistics.stdev(a_test):.2f}" in row
    assert "| 1.50M | 3 |" in row  # parameters, minutes per run (mean of 2 and 4)
    b_row = next(l for l in text.split("**test**")[1].splitlines() if l.startswith("| B |"))
    assert f"| {bleu['better', 1, 'test']:.2f} | – | {bleu['better', 1, 'test']:.2f} |" in b_row
    # B - A: one seed only (B has no seed 2), a clear and significant gain
    diff = bleu["better", 1, "val"] - bleu["base", 1, "val"]
    line = next(l for l in text.splitlines() if l.startswith("| B − A | val |"))
    match = re.search(r"\| ([+-][\d.]+) \(p = ([\d.]+)\) \| – \|", line)
    assert match and float(match[1]) == pytest.approx(diff, abs=0.006) and diff > 10
    assert float(match[2]) < 0.01
    # C - B on seed 1: other hypotheses of the same quality, no significant difference
    assert data["tests"]["C", "B", 1, "val"] > 0.05
    assert Image.open(figure).size[0] > 0


@pytest.mark.slow
def test_approximate_randomisation_agrees_on_a_clear_gain(ablation):
    tmp_path, _, _ = ablation
    data, _, _ = report(tmp_path, "--test", "ar")
    assert data["tests"]["B", "A", 1, "test"] < 0.01
    assert data["tests"]["C", "B", 1, "test"] > 0.05


def test_a_hypothesis_file_of_another_length_is_refused(ablation):
    tmp_path, _, _ = ablation
    path = tmp_path / "results" / "base.seed1.val.hyp"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(SystemExit, match="base.seed1.val.hyp has 59 lines but the reference "
                                         "of val has 60"):
        report(tmp_path)


def test_a_difference_needs_its_rows(ablation):
    tmp_path, _, _ = ablation
    with pytest.raises(SystemExit, match="no --row D=NAME"):
        report(tmp_path, "--difference", "D-A")
