"""Speed of the recurrent encoder layers against ``torch.nn.LSTM``.

    fairseq-posattn-bench-recurrent                  # d=512, T=64, B=32, float32, CPU
    fairseq-posattn-bench-recurrent --profile        # + torch.profiler tables of the ON-LSTM layer
    fairseq-posattn-bench-recurrent --threads 1 --repeats 11
    fairseq-posattn-bench-recurrent --min-length 32  # padded batches, lengths 32..64
    fairseq-posattn-bench-recurrent --device cuda --bf16   # or --fp16: every row in half precision

Rows, all bidirectional with hidden = d per direction:

* ``nn.LSTM``: a raw ``torch.nn.LSTM(d, d, bidirectional=True)`` on the
  unpadded ``[T, B, d]`` batch (oneDNN's fused RNN on CPU when available),
  the reference (on CUDA the run also names the GPU kernels of one of its
  training steps, which say which algorithm cuDNN took);
* ``LSTM layer``: :class:`RecurrentLayer` with ``cell="lstm"`` (packed
  ``nn.LSTM`` + 2d -> d projection + residual + pad mask);
* ``ON-LSTM layer``: :class:`RecurrentLayer` with ``cell="onlstm"``, on
  the kernel ``auto`` takes here (:mod:`..kernels.dispatch`);
* on CUDA, the same layer on each candidate of ``--kernels``
  (:mod:`..kernels.candidates`), a row named after it;
* ``ON-LSTM, reference``: the same layer on the reference, where a fast path applies.

With ``--min-length L`` the layer rows get a padded batch, sentence lengths
uniform in ``[L, T]`` (the first ``T``), as ``fairseq-posattn-bench`` builds
its batches; they skip the pads, ``nn.LSTM`` keeps the full batch.

Each row is timed for training (forward + backward of ``out.sum()``,
gradients reset before each run) and then, after all the training repeats,
for inference (forward under ``torch.no_grad``, call after call with the same
weights, as in decoding); the rows are interleaved within each repeat, and
the median over repeats is reported with ratios to ``nn.LSTM`` (the ratio of
the medians, and in brackets the range of the per-repeat ratios, each against
the ``nn.LSTM`` run of the same repeat).  ON-LSTM has 6h gate units per
direction against LSTM's 4h (1.5x the recurrent and input-projection FLOPs),
and the layers add a 2d -> d projection.
"""

import argparse
import json
import statistics
import time
from typing import List, Optional, Sequence

import torch

from fairseq_posattn.bench.timing import ratio_range, synchronize
from fairseq_posattn.kernels import candidates, dispatch, onednn
from fairseq_posattn.modules.recurrent import RecurrentLayer

# the recurrence's candidates, which --kernels times on CUDA besides the kernel auto takes
CANDIDATES = [k.name for k in dispatch.CANDIDATES if k.layer == dispatch.RECURRENCE]


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
    p.add_argument("--min-length", type=int, default=None,
                   help="pad the layers' batch: lengths uniform in [MIN_LENGTH, seq-len] (default: all seq-len)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (on cuda nn.LSTM is cuDNN's)")
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--fp16", dest="dtype", action="store_const", const=torch.float16,
                           default=torch.float32, help="every row's weights and inputs in float16")
    precision.add_argument("--bf16", dest="dtype", action="store_const", const=torch.bfloat16,
                           help="every row's weights and inputs in bfloat16")
    p.add_argument("--kernels", type=candidate_kernels, default=",".join(CANDIDATES),
                   help="on CUDA, the candidate kernels timed besides the one auto takes, comma-separated "
                        f"(default: {','.join(CANDIDATES)}; '' for none)")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler's forward/backward split and top ops of the ON-LSTM layer")
    p.add_argument("--json", default=None, help="also write the results here")
    return p


MATMULS = ("aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm") + onednn.MATMUL_OPS


def _zero(module):
    for p in module.parameters():
        p.grad = None


def build(args):
    torch.manual_seed(0)
    d, t, b = args.dim, args.seq_len, args.batch
    x = torch.randn(t, b, d).to(args.device, args.dtype).requires_grad_()
    lengths = torch.full((b,), t, dtype=torch.long)
    if args.min_length is not None:
        lengths = torch.randint(args.min_length, t + 1, (b,))
        lengths[0] = t
    lengths = lengths.to(args.device)
    lstm = torch.nn.LSTM(d, d, bidirectional=True).to(args.device, args.dtype)
    rows = {
        "nn.LSTM": (lstm, lambda: lstm(x)[0]),
    }
    layers = [("LSTM layer", "lstm", "auto"), ("ON-LSTM layer", "onlstm", "auto")]
    fast = dispatch.recurrent_kernel("auto", x.device, x.dtype)
    if fast is dispatch.ONLSTM_TRITON:
        layers += [(name, "onlstm", name) for name in args.kernels]
    if fast is not dispatch.ONLSTM_REFERENCE:
        layers.append(("ON-LSTM, reference", "onlstm", "reference"))
    for label, cell, kernel in layers:
        layer = RecurrentLayer(d, cell, kernel="auto" if kernel in CANDIDATES else kernel)
        if kernel in CANDIDATES:
            candidates.use(layer, kernel)
        layer = layer.to(args.device, args.dtype)
        rows[label] = (layer, (lambda layer=layer: layer(x, lengths)))
    return x, rows


def train_step(x, module, fn):
    _zero(module)
    x.grad = None
    fn().sum().backward()
    synchronize(x.device)


def infer_step(x, fn):
    with torch.no_grad():
        fn()
    synchronize(x.device)


def run(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    x, rows = build(args)
    train = {k: [] for k in rows}
    infer = {k: [] for k in rows}
    for times, step in ((train, train_step), (infer, lambda x, module, fn: infer_step(x, fn))):
        for repeat in range(args.warmup + args.repeats):
            for label, (module, fn) in rows.items():
                start = time.perf_counter()
                step(x, module, fn)
                if repeat >= args.warmup:
                    times[label].append(time.perf_counter() - start)
    result = {
        "config": {"device": str(x.device), "dtype": str(x.dtype).replace("torch.", ""),
                   "dim": args.dim, "seq_len": args.seq_len,
                   "batch": args.batch, "repeats": args.repeats, "min_length": args.min_length,
                   "threads": torch.get_num_threads(), "torch": torch.__version__,
                   "mkldnn": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled},
        "rows": [],
    }
    ref_train = statistics.median(train["nn.LSTM"])
    ref_infer = statistics.median(infer["nn.LSTM"])
    for label, (module, _) in rows.items():
        tr, inf = statistics.median(train[label]), statistics.median(infer[label])
        result["rows"].append({
            "label": label,
            "params": sum(p.numel() for p in module.parameters()),
            "train_ms": 1e3 * tr, "train_ratio": tr / ref_train,
            "train_ratio_range": ratio_range(train[label], train["nn.LSTM"]),
            "infer_ms": 1e3 * inf, "infer_ratio": inf / ref_infer,
            "infer_ratio_range": ratio_range(infer[label], infer["nn.LSTM"]),
            "train_ms_all": [round(1e3 * v, 1) for v in train[label]],
        })
    if x.is_cuda:
        result["lstm_kernels"] = lstm_kernels(x, *rows["nn.LSTM"])
    return result


def profile_table(args, row_limit=15):
    """torch.profiler on the ON-LSTM layer: one train step (forward/backward split) and one inference step."""
    from torch.profiler import profile, record_function

    x, rows = build(args)
    module, fn = rows["ON-LSTM layer"]
    for _ in range(args.warmup):
        train_step(x, module, fn)
    _zero(module)
    x.grad = None
    with profile() as prof:
        with record_function("forward"):
            out = fn().sum()
        with record_function("backward"):
            out.backward()
    with profile() as prof_infer:
        infer_step(x, fn)
    tables = []
    for title, events in (("train step", prof.key_averages()), ("inference step", prof_infer.key_averages())):
        phases = {e.key: e.cpu_time_total for e in events if e.key in ("forward", "backward")}
        ops = [e for e in events if e.key not in ("forward", "backward")]
        total = sum(e.self_cpu_time_total for e in ops)
        matmul = sum(e.self_cpu_time_total for e in ops if e.key in MATMULS)
        head = "ON-LSTM layer, one %s under the profiler: %.1f ms self CPU, of which matmuls %.1f ms (%.0f%%)" % (
            title, total / 1e3, matmul / 1e3, 100.0 * matmul / total)
        if phases:
            head += "; forward %.1f ms, backward %.1f ms" % (phases["forward"] / 1e3, phases["backward"] / 1e3)
        tables.append(head + "\n" + events.table(sort_by="self_cpu_time_total", row_limit=row_limit))
    return "\n".join(tables)


def lstm_kernels(x, module, fn, top: int = 6) -> list:
    """The GPU kernels of one ``nn.LSTM`` training step, most time first: their
    names say which algorithm cuDNN took (``persist`` in the persistent ones)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train_step(x, module, fn)
    kernels = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    kernels.sort(key=lambda e: -e.self_device_time_total)
    return [e.key for e in kernels[:top]]


def main(argv=None):
    args = get_parser().parse_args(argv)
    result = run(args)
    cfg = result["config"]
    lengths = "T" if cfg["min_length"] is None else "%d..T" % cfg["min_length"]
    print("d=%(dim)d T=%(seq_len)d B=%(batch)d %(dtype)s %(device)s, %(threads)d threads, torch %(torch)s, "
          "median of %(repeats)d interleaved repeats" % cfg + ", layer lengths " + lengths)
    print("%-18s %10s %10s %22s %10s %22s" % ("", "params", "train ms", "ratio [per repeat]", "infer ms",
                                              "ratio [per repeat]"))
    for r in result["rows"]:
        print("%-18s %10d %10.1f %6.2fx [%5.2f-%5.2f] %10.1f %6.2fx [%5.2f-%5.2f]" % (
            r["label"], r["params"], r["train_ms"], r["train_ratio"], *r["train_ratio_range"],
            r["infer_ms"], r["infer_ratio"], *r["infer_ratio_range"]))
    if "lstm_kernels" in result:
        print("nn.LSTM's GPU kernels in one training step, most time first:", "; ".join(result["lstm_kernels"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.profile:
        print()
        print(profile_table(args))
    return result


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """The console script: :func:`main` without its return value."""
    main(argv)


if __name__ == "__main__":
    cli_main()
