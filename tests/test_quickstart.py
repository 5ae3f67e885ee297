"""The quickstart script end to end on a small corpus and a few updates
(corpus -> BPE -> trees -> binarize -> train -> generate -> BLEU -> interactive)."""

import re

import pytest

from conftest import REPO, run
from test_results import quickstart_figure

pytestmark = pytest.mark.slow  # command lines, recipes, training


def test_quickstart_runs_every_step_with_and_without_structure(tmp_path):
    """STRUCTURE=on, then STRUCTURE=off in the same WORK: the second run
    reuses the corpus, the BPE'd text and the binarized data with its trees,
    and trains, decodes and translates with its own model."""
    logs = {}
    for structure in ("on", "off"):
        proc = run(
            ["bash", REPO / "examples" / "quickstart" / "run.sh"],
            env={"WORK": str(tmp_path), "TRAIN_SIZE": "200", "MAX_UPDATE": "3",
                 "STRUCTURE": structure, "THREADS": "1"},
            timeout=600,
        )
        log = logs[structure] = proc.stdout + proc.stderr
        # the figure scripts/quickstart_figure.py reads from the output
        figure = quickstart_figure().figures(log)
        assert figure["sentences"] == 300 and 0 <= figure["exact"] <= 300 and 0 <= figure["bleu"] <= 100
        assert figure["signature"].startswith("nrefs:1|")
        arch = "transformer_struct" if structure == "on" else "transformer_posattn --relative-positions"
        assert f"--task translation_struct --arch {arch}" in log
        # two raw sentences translated by fairseq-interactive after BPE (and parsing, for transformer_struct)
        assert len(re.findall(r"^\[quickstart\]   D-\d+  ", log, re.M)) == 2
    assert (tmp_path / "data-bin-bpe150" / "train.en-de.en.trees.bin").exists()
    assert "writing the toy corpus" in logs["on"]
    for reused in ("reusing the corpus in", "reusing the BPE'd corpus in", "reusing the binarized data in"):
        assert reused in logs["off"]
    assert (tmp_path / "checkpoints" / "transformer_struct" / "checkpoint_best.pt").exists()
    assert (tmp_path / "checkpoints" / "transformer_posattn-rel" / "checkpoint_best.pt").exists()
