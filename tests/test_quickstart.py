"""The quickstart script end to end on a small corpus and a few updates
(corpus -> BPE -> trees -> binarize -> train -> generate -> BLEU -> interactive)."""

import re

import pytest

from conftest import REPO, run

pytestmark = pytest.mark.slow  # command lines, recipes, training


@pytest.mark.parametrize("structure", ["on", "off"])
def test_quickstart_runs_every_step(structure, tmp_path):
    proc = run(
        ["bash", REPO / "examples" / "quickstart" / "run.sh"],
        env={"WORK": str(tmp_path), "TRAIN_SIZE": "200", "MAX_UPDATE": "3",
             "STRUCTURE": structure, "THREADS": "1"},
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert re.search(r"\[quickstart\] 300 test sentences, \d+ translated exactly", log)
    assert re.search(r"\[quickstart\] BLEU = [\d.]+", log)
    assert "sacrebleu signature: nrefs:1" in log
    arch = "transformer_struct" if structure == "on" else "transformer_posattn --relative-positions"
    assert f"--task translation_struct --arch {arch}" in log
    # two raw sentences translated by fairseq-interactive after BPE and parsing
    assert len(re.findall(r"^\[quickstart\]   D-\d+  ", log, re.M)) == 2
    assert (tmp_path / "data-bin-bpe150" / "train.en-de.en.trees.bin").exists()
