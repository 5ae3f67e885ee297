"""torch.load(weights_only=True) of fairseq checkpoints after importing the plugin.

Every load happens in a fresh interpreter, so the allow-list state of the
test process does not matter.
"""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from conftest import (TINY_MODEL_ARGS, USER_DIR, cli, free_port, run_cli, run_python,
                      run_cli_in_process, subprocess_env, tiny_training)

pytestmark = [
    pytest.mark.skipif(not hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint"),
                       reason="needs torch >= 2.5 (weights_only loading API)"),
    pytest.mark.slow,  # trains and loads checkpoints through the command lines
]
# torch >= 2.6: torch.load defaults to weights_only=True
WEIGHTS_ONLY_DEFAULT = Version(torch.__version__.split("+")[0]) >= Version("2.6")


@pytest.fixture(scope="session")
def trained_checkpoints(toy_data_bin, tmp_path_factory) -> Path:
    """checkpoint{1,2}.pt, checkpoint_best/last.pt and checkpoint_E_U.pt of a
    tiny transformer trained with optimizer state, --eval-bleu meters (numpy
    arrays in extra_state) and an inverse_sqrt schedule, plus an average of
    the two epoch checkpoints made the way fairseq's average_checkpoints.py
    makes it."""
    save_dir = tmp_path_factory.mktemp("ckpt")
    run_cli_in_process("fairseq-train", *tiny_training(
        toy_data_bin, save_dir, max_update=6, extra=[
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2",
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--save-interval-updates", "2", "--validate-interval-updates", "2",
            "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}',
            "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric",
        ]))
    names = sorted(p.name for p in save_dir.glob("*.pt"))
    assert {"checkpoint1.pt", "checkpoint2.pt", "checkpoint_best.pt",
            "checkpoint_last.pt"} <= set(names), names
    assert any(re.fullmatch(r"checkpoint_\d+_\d+\.pt", n) for n in names), names
    # average_checkpoints.py: torch.load every input, keep the first state,
    # replace "model" by the element-wise mean (an OrderedDict of tensors).
    run_python(textwrap.dedent("""
        import collections, sys, torch
        import fairseq_posattn  # the script needs the allow-list too
        states = [torch.load(p, map_location="cpu") for p in sys.argv[1:3]]
        new = states[0]
        new["model"] = collections.OrderedDict(
            (k, sum(s["model"][k].float() for s in states) / len(states))
            for k in states[0]["model"])
        torch.save(new, sys.argv[3])
        """), save_dir / "checkpoint1.pt", save_dir / "checkpoint2.pt", save_dir / "averaged.pt")
    assert (save_dir / "averaged.pt").exists()
    return save_dir


LOAD_ALL = textwrap.dedent("""
    import glob, json, pickle, sys, torch
    paths = sorted(glob.glob(sys.argv[1] + "/*.pt"))
    report = {"before": {}, "after": {}, "unsafe": {}}
    for p in paths:
        report["unsafe"][p] = torch.serialization.get_unsafe_globals_in_checkpoint(p)
        try:
            torch.load(p)
            report["before"][p] = "ok"
        except pickle.UnpicklingError as e:
            report["before"][p] = str(e)
    import fairseq_posattn
    from fairseq_posattn.compat.safe_loading import fairseq_checkpoint_globals
    report["allowed"] = [name for _, name in fairseq_checkpoint_globals()]
    for p in paths:
        state = torch.load(p)  # weights_only left at its default
        report["after"][p] = sorted(state)
    print(json.dumps(report))
    """)


def test_fairseq_checkpoints_load_with_weights_only(trained_checkpoints):
    proc = run_python(LOAD_ALL, trained_checkpoints)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(report["after"]) >= 6
    for path, keys in report["after"].items():
        assert "model" in keys and "cfg" in keys, path
        # everything a checkpoint needs is on the list, and nothing else
        assert set(report["unsafe"][path]) <= set(report["allowed"]), path
        assert "argparse.Namespace" in report["unsafe"][path]
        if WEIGHTS_ONLY_DEFAULT:
            assert "Weights only load failed" in report["before"][path], path
    # the --eval-bleu meters hold numpy arrays: the numpy globals are needed
    last = str(trained_checkpoints / "checkpoint_last.pt")
    assert "numpy.ndarray" in report["unsafe"][last]
    # the state that was written is the state that is read
    state = torch.load(last, weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 6
    assert "last_optimizer_state" in state and "metrics" in state["extra_state"]


def test_load_model_ensemble(trained_checkpoints):
    code = textwrap.dedent("""
        import sys, torch
        import fairseq_posattn
        from fairseq import checkpoint_utils
        paths = sys.argv[1:]
        models, cfg = checkpoint_utils.load_model_ensemble(paths)
        assert len(models) == len(paths)
        for m, p in zip(models, paths):
            ref = torch.load(p)["model"]
            for k, v in m.state_dict().items():
                assert torch.equal(v, ref[k].to(v.dtype)), (p, k)
        print("ARCH", getattr(cfg.model, "arch", None) or getattr(cfg.model, "_name", None))
        """)
    paths = [trained_checkpoints / n for n in
             ("checkpoint_best.pt", "checkpoint_last.pt", "averaged.pt")]
    proc = run_python(code, *paths)
    assert "ARCH transformer" in proc.stdout


def test_generate_loads_averaged_checkpoint(trained_checkpoints, toy_data_bin):
    proc = run_cli(
        "fairseq-generate", toy_data_bin, "--user-dir", USER_DIR,
        "--path", trained_checkpoints / "averaged.pt", "--gen-subset", "valid",
        "--beam", "2", "--max-len-b", "5", "--batch-size", "16",
        "--cpu", "--num-workers", "0",
    )
    assert sum(line.startswith("H-") for line in proc.stdout.splitlines()) == 10


UNSAFE = textwrap.dedent("""
    import argparse, collections, fractions, os, pickle, sys, torch
    import numpy as np
    import fairseq_posattn

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo PAYLOAD-RAN",))

    class Plain:
        pass

    cases = {
        "fraction": fractions.Fraction(1, 3),
        "custom-class": Plain(),
        "reduce-payload": Payload(),
        "object-array": np.array([fractions.Fraction(1, 2)], dtype=object),
        "namespace-holding-fraction": argparse.Namespace(x=fractions.Fraction(1, 2)),
        "float32-array": np.zeros(3, dtype=np.float32),
    }
    for name, obj in cases.items():
        path = os.path.join(sys.argv[1], name + ".pt")
        torch.save({"model": {"w": torch.zeros(2)}, "cfg": {"model": argparse.Namespace(arch="x")},
                    "extra_state": {"obj": obj}}, path)
        try:
            torch.load(path)
            print(name, "LOADED")
        except pickle.UnpicklingError as e:
            print(name, "REFUSED", "Weights only load failed" in str(e))
    """)


def test_other_objects_are_still_refused(tmp_path):
    proc = run_python(UNSAFE, tmp_path)
    result = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines()
                  if not line.startswith("PAYLOAD"))
    assert "PAYLOAD-RAN" not in proc.stdout
    for name in ("fraction", "custom-class", "reduce-payload", "object-array",
                 "namespace-holding-fraction"):
        assert result[name] == "REFUSED True", (name, proc.stdout)
    # a float32 array needs a dtype class that is not on the list either
    assert result["float32-array"] == "REFUSED True"


def test_broadcast_globals_are_not_allowed_for_files(tmp_path):
    code = textwrap.dedent("""
        import pickle, sys, torch
        from omegaconf import OmegaConf
        import fairseq_posattn
        from fairseq.distributed import utils as du
        names = {str(g) for g in torch.serialization.get_safe_globals()}
        assert not any("DictConfig" in n or "_TensorPlaceholder" in n for n in names), names
        assert hasattr(du._broadcast_object_slow, "__wrapped__")  # allows them while it runs
        torch.save({"cfg": OmegaConf.create({"a": 1})}, sys.argv[1])
        try:
            torch.load(sys.argv[1])
            print("LOADED")
        except pickle.UnpicklingError:
            print("REFUSED")
        """)
    proc = run_python(code, tmp_path / "dc.pt")
    assert proc.stdout.strip().splitlines()[-1] == "REFUSED"


def test_distributed_resume_two_processes(toy_data_bin, tmp_path):
    """2-process gloo training resumed from a checkpoint: rank 0 reads the file
    and broadcasts the state (torch.load on rank 1)."""
    save_dir = tmp_path / "ckpt"

    def launch(max_update):
        port = free_port()
        args = [
            cli("fairseq-train"), str(toy_data_bin), "--user-dir", str(USER_DIR),
            "--arch", "transformer", *TINY_MODEL_ARGS, "--optimizer", "adam",
            "--lr", "1e-3", "--max-tokens", "1000", "--max-update", str(max_update),
            "--save-dir", str(save_dir), "--cpu", "--num-workers", "0", "--no-progress-bar",
            "--ddp-backend", "legacy_ddp", "--distributed-backend", "gloo",
            "--distributed-world-size", "2", "--distributed-no-spawn",
            "--distributed-init-method", "tcp://127.0.0.1:%d" % port,
            "--disable-validation",
        ]
        procs = [subprocess.Popen(args + ["--distributed-rank", str(r)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=subprocess_env())
                 for r in (0, 1)]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        for p, out in zip(procs, outs):
            assert p.returncode == 0, out[-4000:]
        return outs

    launch(2)
    assert (save_dir / "checkpoint_last.pt").exists()
    outs = launch(4)
    assert "Loaded checkpoint" in outs[0] and "@ 2 updates" in outs[0]
    assert "num_updates 4" in outs[0] or '"num_updates": "4"' in outs[0]
