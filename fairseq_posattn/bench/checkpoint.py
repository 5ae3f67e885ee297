"""Cost of verifying a checkpoint's checksums against loading it.

    python -m fairseq_posattn.bench.checkpoint --work /tmp/bench-ckpt   # base size, 15 rounds

A base-size ``transformer_wmt_en_de`` with its Adam state, saved as
``fairseq-train`` saves it; :func:`~fairseq_posattn.compat.checkpoint_integrity.verify_checkpoint`
and ``torch.load`` of the file timed in ``--rounds`` interleaved rounds (wall
clock and CPU time).  The manual: docs/reliability.md.
"""

import argparse
import os
import statistics
import time

import torch

from ..compat.checkpoint_integrity import verify_checkpoint
from ..models.from_flags import build_model_from_flags
from .timing import per_repeat_ratios, write_json


def save_base_checkpoint(path: str, vocab: int) -> int:
    """Write a base-size transformer checkpoint with Adam state; return its bytes."""
    args, model = build_model_from_flags(
        ["--arch", "transformer_wmt_en_de", "--share-all-embeddings"], vocab)
    optimizer = torch.optim.Adam(model.parameters())
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    torch.save({"args": None, "cfg": {"model": args}, "model": model.state_dict(),
                "optimizer_history": [{"optimizer_name": "Adam", "num_updates": 1}],
                "last_optimizer_state": optimizer.state_dict(), "extra_state": {}}, path)
    return os.path.getsize(path)


def time_rounds(path: str, rounds: int) -> dict:
    """Wall and CPU seconds of verifying and of loading ``path``, round by round."""
    steps = {"verify": lambda: verify_checkpoint(path),
             "torch.load": lambda: torch.load(path, map_location="cpu")}
    times = {name: {"wall": [], "cpu": []} for name in steps}
    for step in steps.values():  # warm-up: the file into the page cache
        step()
    for _ in range(rounds):
        for name, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            times[name]["wall"].append(time.perf_counter() - wall)
            times[name]["cpu"].append(time.process_time() - cpu)
    return times


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m fairseq_posattn.bench.checkpoint",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, help="folder for the checkpoint (about 0.7 GB)")
    p.add_argument("--vocab", type=int, default=32000, help="joined dictionary size")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", default=None, help="also write the timings here")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, "checkpoint_base.pt")
    size = save_base_checkpoint(path, args.vocab)
    times = time_rounds(path, args.rounds)
    result = {"bytes": size, "rounds": args.rounds, "times": times, "ratios": {}}
    print("%s: %.1f MB, %d rounds" % (path, size / 1e6, args.rounds))
    for clock in ("wall", "cpu"):
        ratios = per_repeat_ratios(times["verify"][clock], times["torch.load"][clock])
        result["ratios"][clock] = ratios
        print("%-4s verify %.3f s, torch.load %.3f s (medians); verify / torch.load per round: "
              "median %.2f, range %.2f-%.2f" % (
                  clock, statistics.median(times["verify"][clock]),
                  statistics.median(times["torch.load"][clock]), statistics.median(ratios),
                  min(ratios), max(ratios)))
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
