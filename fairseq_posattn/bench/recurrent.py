"""Speed of the recurrent encoder layers against ``torch.nn.LSTM``.

    fairseq-posattn-bench-recurrent                  # d=512, T=64, B=32, bidirectional, float32, CPU
    fairseq-posattn-bench-recurrent --profile        # + torch.profiler tables of the ON-LSTM layer
    fairseq-posattn-bench-recurrent --min-length 32  # padded batches, lengths 32..64
    fairseq-posattn-bench-recurrent --device cuda --fp16 --unidirectional --batch 128   # cuDNN at its best

Rows (:func:`build`): ``nn.LSTM`` on the unpadded batch, the reference; the
LSTM and ON-LSTM layers on ``auto``'s kernel; on CUDA the candidates of
``--kernels``; the ON-LSTM on the reference.  Timed as :mod:`.models` times.
"""

import argparse
import functools
from typing import Callable, List, NamedTuple, Optional

import torch

from fairseq_posattn.bench.timing import (PHASES, TIME_COLUMNS, Timer, add_precision_arguments, add_timing_arguments,
                                          console_script, finish, first_calls, interleaved, phase_figures, synchronize,
                                          time_cells)
from fairseq_posattn.bench.verdict import run_notes
from fairseq_posattn.kernels import manual, onednn
from fairseq_posattn.modules import candidates
from fairseq_posattn.modules.kernel_choice import recurrent_kernel
from fairseq_posattn.modules.recurrent import RecurrentLayer

# the recurrence's candidates, which --kernels times on CUDA besides the kernel auto takes
CANDIDATES = [k.name for k in manual.CANDIDATES if k.layer == manual.RECURRENCE]


def candidate_kernels(text: str) -> List[str]:
    """``--kernels``: comma-separated names of :data:`CANDIDATES`."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in CANDIDATES]
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown)}: not one of {', '.join(CANDIDATES)}")
    return names


def get_parser():
    p = argparse.ArgumentParser(prog="fairseq-posattn-bench-recurrent",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=512, help="d (hidden = d per direction)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--unidirectional", action="store_true", help="every row in one direction (default: both)")
    p.add_argument("--min-length", type=int, default=None,
                   help="pad the layers' batch: lengths uniform in [MIN_LENGTH, seq-len] (default: all seq-len)")
    add_timing_arguments(p, repeats=7, calls="calls")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (on cuda nn.LSTM is cuDNN's)")
    add_precision_arguments(p, "dtype", torch.float32, "every row's weights and inputs in {0}")
    p.add_argument("--kernels", type=candidate_kernels, default=",".join(CANDIDATES),
                   help="on CUDA, the candidate kernels timed besides the one auto takes, comma-separated "
                        f"(default: {','.join(CANDIDATES)}; '' for none)")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler's forward/backward split and top ops of the ON-LSTM layer")
    return p


MATMULS = ("aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm") + onednn.MATMUL_OPS
ONLSTM = "ON-LSTM layer"


class Row(NamedTuple):
    module: torch.nn.Module
    fn: Callable[[], torch.Tensor]
    baseline: str
    candidate: Optional[str] = None


def lstm_label(args) -> str:
    """``nn.LSTM``'s row, named for cuDNN's persistent kernel where PyTorch
    lets cuDNN take it (its heuristics for an LSTM on a GPU of 98 or more
    multiprocessors, sm_80 and later but sm_86)."""
    persistent = (args.device.startswith("cuda") and args.dtype == torch.float16 and args.unidirectional
                  and args.dim % 128 == 0 and args.dim <= 1024 and args.batch % 8 == 0 and args.batch <= 128)
    return "nn.LSTM cuDNN persistent" if persistent else "nn.LSTM"


def build(args):
    """The input and the rows, the reference first."""
    torch.manual_seed(0)
    d, t, b = args.dim, args.seq_len, args.batch
    x = torch.randn(t, b, d).to(args.device, args.dtype).requires_grad_()
    lengths = torch.full((b,), t, dtype=torch.long)
    if args.min_length is not None:
        lengths = torch.randint(args.min_length, t + 1, (b,))
        lengths[0] = t
    lengths = lengths.to(args.device)
    both = not args.unidirectional
    lstm = torch.nn.LSTM(d, d, bidirectional=both).to(args.device, args.dtype)
    reference = lstm_label(args)
    rows = {reference: Row(lstm, lambda: lstm(x)[0], reference)}
    layers = [("LSTM layer", "lstm", "auto"), (ONLSTM, "onlstm", "auto")]
    fast = recurrent_kernel("auto", x.device, x.dtype)
    if fast == "onlstm_triton":
        layers += [(name, "onlstm", name) for name in args.kernels]
    if fast != "onlstm_reference":
        layers.append(("ON-LSTM, reference", "onlstm", "reference"))
    for label, cell, kernel in layers:
        candidate = kernel if kernel in CANDIDATES else None
        layer = RecurrentLayer(d, cell, bidirectional=both, kernel="auto" if candidate else kernel)
        if candidate:
            candidates.use(layer, candidate)
        layer = layer.to(args.device, args.dtype)
        rows[label] = Row(layer, (lambda layer=layer: layer(x, lengths)), ONLSTM if candidate else reference, candidate)
    return x, rows


def train_step(x, row: Row) -> None:
    row.module.zero_grad(set_to_none=True)
    x.grad = None
    row.fn().sum().backward()


@torch.no_grad()
def infer_step(row: Row) -> None:
    row.fn()


def run(args, timer: Optional[Timer] = None):
    if args.threads:
        torch.set_num_threads(args.threads)
    x, rows = build(args)
    timer = timer or Timer.for_device(x.device)
    steps = {label: {"train": functools.partial(train_step, x, row), "infer": functools.partial(infer_step, row)}
             for label, row in rows.items()}
    started, failed = first_calls({label: (lambda s=s: [step() for step in s.values()]) for label, s in steps.items()},
                                  {label: row.baseline for label, row in rows.items()})
    if next(iter(rows)) in failed:
        raise SystemExit(f"the reference did not run: {failed[next(iter(rows))]}")
    calls, times = interleaved({label: steps[label] for label in started}, args.repeats, args.min_repeat_ms / 1000,
                               timer)
    result = {
        "config": {"device": str(x.device), "dtype": str(x.dtype).replace("torch.", ""),
                   "dim": args.dim, "seq_len": args.seq_len, "batch": args.batch,
                   "directions": 1 if args.unidirectional else 2, "repeats": args.repeats,
                   "min_repeat_ms": args.min_repeat_ms, "min_length": args.min_length,
                   "threads": torch.get_num_threads(), "torch": torch.__version__,
                   "mkldnn": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled},
        "failed": failed,
        "rows": [],
    }
    for label in started:
        row = rows[label]
        entry = {"label": label, "baseline": row.baseline, "candidate": row.candidate,
                 "params": sum(p.numel() for p in row.module.parameters())}
        for phase in PHASES:
            entry.update(phase_figures(phase, times[phase][label], times[phase][row.baseline], calls[label][phase]))
        result["rows"].append(entry)
    if x.is_cuda:
        result["lstm_kernels"] = lstm_kernels(x, next(iter(rows.values())))
    return result


def profile_table(args, row_limit=15):
    """torch.profiler on the ON-LSTM layer: one train step (forward/backward split) and one inference step."""
    from torch.profiler import profile, record_function

    x, rows = build(args)
    row = rows[ONLSTM]

    def train():
        row.module.zero_grad(set_to_none=True)
        x.grad = None
        with record_function("forward"):
            out = row.fn().sum()
        with record_function("backward"):
            out.backward()

    for _ in range(2):  # warm-up
        train()
    tables = []
    for title, step in (("train step", train), ("inference step", functools.partial(infer_step, row))):
        with profile() as prof:
            step()
        events = prof.key_averages()
        phases = {e.key: e.cpu_time_total for e in events if e.key in ("forward", "backward")}
        ops = [e for e in events if e.key not in phases]
        total = sum(e.self_cpu_time_total for e in ops)
        matmul = sum(e.self_cpu_time_total for e in ops if e.key in MATMULS)
        head = (f"ON-LSTM layer, one {title} under the profiler: {total / 1e3:.1f} ms self CPU, of which matmuls "
                f"{matmul / 1e3:.1f} ms ({100.0 * matmul / total:.0f}%)")
        if phases:
            head += f"; forward {phases['forward'] / 1e3:.1f} ms, backward {phases['backward'] / 1e3:.1f} ms"
        tables.append(head + "\n" + events.table(sort_by="self_cpu_time_total", row_limit=row_limit))
    return "\n".join(tables)


def lstm_kernels(x, row: Row, top: int = 6) -> list:
    """The GPU kernels of one ``nn.LSTM`` training step, most time first: their
    names say which algorithm cuDNN took (``persist`` in the persistent ones)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train_step(x, row)
        synchronize(x.device)
    kernels = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    kernels.sort(key=lambda e: -e.self_device_time_total)
    return [e.key for e in kernels[:top]]


def main(argv=None):
    args = get_parser().parse_args(argv)
    result = run(args)
    cfg = result["config"]
    lengths = "T" if cfg["min_length"] is None else "%d..T" % cfg["min_length"]
    print("d=%(dim)d T=%(seq_len)d B=%(batch)d directions=%(directions)d %(dtype)s %(device)s, %(threads)d threads, "
          "torch %(torch)s, median of %(repeats)d interleaved repeats of at least %(min_repeat_ms)g ms" % cfg
          + ", layer lengths " + lengths)
    table = [f"{'row':<24} {'params':>10} {TIME_COLUMNS}  base"]
    table += [f"{r['label']:<24} {r['params']:>10,} {time_cells(r)}  {r['baseline']}" for r in result["rows"]]
    table += run_notes(result)
    if "lstm_kernels" in result:
        persistent = any("persist" in name.lower() for name in result["lstm_kernels"])
        table.append(f"nn.LSTM's GPU kernels in one training step, most time first ({'a' if persistent else 'no'} "
                     "persistent kernel): " + "; ".join(result["lstm_kernels"]))
    if args.profile:
        table += ["", profile_table(args)]
    return finish(result, "\n".join(table), args.json)


cli_main = console_script(main)

if __name__ == "__main__":
    cli_main()
