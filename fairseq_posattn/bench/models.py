"""Side-by-side cost of every architecture against fairseq's stock Transformer.

    fairseq-posattn-bench
    fairseq-posattn-bench --rows stock,P,shaw --config wmt --fp16 --json out.json

Per row, at one model size and batch (``--config``): time per update and per
inference batch (K consecutive calls a repeat, :mod:`.timing`, the rows
interleaved), beam-search speed and peak training memory, each a ratio to the
row's baseline with the range of the per-repeat ratios.  Inference is timed
after the beam search, as a stream of batches sees the weights (the ON-LSTM
lays updated weights out for oneDNN on its first no-grad call).  The rows, the
baselines and the figures' definitions: docs/benchmarks.md.
"""

import argparse
import ctypes
import functools
import gc
import multiprocessing
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from fairseq.sequence_generator import SequenceGenerator
from torch.nn.attention import SDPBackend
from torch.profiler import ProfilerActivity, profile, record_function

from ..models.from_flags import build_model_from_flags, stand_in_dictionary
from ..kernels.candidates import onlstm_cuda_graphs
from ..modules import candidates
from ..structure import batch_tree_inputs, encode_piece_tree, tree_inputs_of
from ..structure.control_trees import random_projective_heads
from .timing import (PHASES, TIME_COLUMNS, Timer, add_precision_arguments, add_timing_arguments, console_script,
                     finish, first_calls, interleaved, per_repeat_ratios, phase_figures, synchronize, time_cells)
from .verdict import outside_band, run_notes


@dataclass
class BenchRow:
    label: str
    arch: str
    flags: List[str] = field(default_factory=list)
    recurrent: bool = False  # K = --layers recurrent layers before the --layers SAN layers
    deep_encoder: bool = False  # a SAN encoder of 2 x --layers (the hybrids' depth)
    baseline: str = "stock"  # the row its ratios are taken against
    by_default: bool = True  # in the run without --rows (the kernel comparisons are asked for by name)
    candidate: Optional[str] = None  # a kernel of fairseq_posattn.kernels.candidates in the layers it computes


ROWS = [
    BenchRow("stock", "transformer"),
    BenchRow("posattn-off", "transformer_posattn"),
    BenchRow("P", "transformer_posattn_p"),
    BenchRow("R", "transformer_posattn_r"),
    BenchRow("PR", "transformer_posattn_pr"),
    BenchRow("temp", "transformer_posattn_temp"),
    BenchRow("conv1d", "transformer_posattn_conv1d"),
    BenchRow("conv2d", "transformer_posattn_conv2d"),
    BenchRow("shaw", "transformer_posattn", ["--relative-positions"]),
    BenchRow("bilan", "transformer_posattn", ["--query-relative-positions"]),
    BenchRow("struct", "transformer_struct"),
    BenchRow("rope", "transformer_rope"),
    BenchRow("alibi", "transformer_alibi"),
    BenchRow("t5", "transformer_t5bias"),
    BenchRow("pascal", "transformer_pascal"),
    BenchRow("depdist", "transformer_depdist"),
    BenchRow("stock-deep", "transformer", deep_encoder=True),
    BenchRow("onlstm-san", "onlstm_san_transformer", recurrent=True, baseline="stock-deep"),
    BenchRow("lstm-san", "onlstm_san_transformer", ["--encoder-recurrent-cell", "lstm"],
             recurrent=True, baseline="stock-deep"),
    # the same models on another --encoder-attention-kernel, each against its row above
    BenchRow("P-sdpa", "transformer_posattn_p", ["--encoder-attention-kernel", "sdpa"],
             baseline="P", by_default=False),
    BenchRow("R-sdpa", "transformer_posattn_r", ["--encoder-attention-kernel", "sdpa"],
             baseline="R", by_default=False),
    BenchRow("bilan-sdpa", "transformer_posattn", ["--query-relative-positions", "--encoder-attention-kernel",
                                                   "sdpa"], baseline="bilan", by_default=False),
    BenchRow("shawkeys", "transformer_posattn", ["--relative-positions", "--no-relative-values"],
             by_default=False),
    BenchRow("shawkeys-sdpa", "transformer_posattn", ["--relative-positions", "--no-relative-values",
                                                      "--encoder-attention-kernel", "sdpa"],
             baseline="shawkeys", by_default=False),
    BenchRow("shaw-explicit", "transformer_posattn", ["--relative-positions", "--encoder-attention-kernel",
                                                      "explicit"], by_default=False),
    BenchRow("struct-explicit", "transformer_struct", ["--encoder-attention-kernel", "explicit"],
             by_default=False),
    BenchRow("conv2d-triton", "transformer_posattn_conv2d", ["--encoder-attention-kernel", "triton"],
             by_default=False),
    # the candidates (fairseq_posattn.kernels.candidates): the 1d convolution's kernels; the hybrid with its
    # recurrence in one launch per layer, or replayed from CUDA graphs (CUDA), against the per-step kernels
    BenchRow("conv1d-triton", "transformer_posattn_conv1d", candidate="conv1d_triton", by_default=False),
    BenchRow("onlstm-san-persistent", "onlstm_san_transformer", recurrent=True, baseline="onlstm-san",
             by_default=False, candidate="onlstm_persistent"),
    BenchRow("onlstm-san-graph", "onlstm_san_transformer", recurrent=True, baseline="onlstm-san",
             by_default=False, candidate="onlstm_cuda_graphs"),
]


ROW_BY_LABEL = {row.label: row for row in ROWS}
# --config: (B, T).  wmt: 16,384 tokens a batch (12k source tokens unpadded), the top of the 8k-16k that WMT14
# runs put in one GPU's batch; fairseq batches sentences of like lengths, so one T, the default's
CONFIGS = {"default": (32, 64), "wmt": (256, 64)}


def _size_flags(row: BenchRow, settings) -> List[str]:
    flags = ["--dropout", "0.1"] + (["--encoder-recurrent-layers", str(settings.layers)] if row.recurrent else [])
    for side, positions in (("encoder", "source"), ("decoder", "target")):
        layers = 2 * settings.layers if row.deep_encoder and side == "encoder" else settings.layers
        flags += [f"--{side}-embed-dim", str(settings.embed_dim), f"--{side}-ffn-embed-dim", str(settings.ffn_dim),
                  f"--{side}-attention-heads", str(settings.heads), f"--{side}-layers", str(layers),
                  f"--max-{positions}-positions", str(settings.max_positions)]
    return flags


def build_model(row: BenchRow, settings, dictionary, extra_flags: Sequence[str] = ()):
    """Build ``row``'s model through fairseq's own argument parsing
    (``extra_flags`` last, so they override the row's), with the row's candidate kernel."""
    _, model = build_model_from_flags(
        ["--arch", row.arch] + _size_flags(row, settings) + row.flags + list(extra_flags),
        len(dictionary), source=dictionary)
    if row.candidate is not None:
        candidates.use(model, row.candidate)
    return model


def make_batch(settings, dictionary, device):
    """Left-padded sources of lengths in [T/2, T], targets of length T."""
    g = torch.Generator().manual_seed(settings.seed)
    B, T = settings.batch, settings.length
    src = torch.randint(dictionary.nspecial, len(dictionary), (B, T), generator=g)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    lengths[0] = T
    for b in range(B):
        src[b, : T - lengths[b]] = dictionary.pad()
        src[b, -1] = dictionary.eos()
    tgt = torch.randint(dictionary.nspecial, len(dictionary), (B, T), generator=g)
    prev = torch.cat([torch.full((B, 1), dictionary.eos()), tgt[:, :-1]], dim=1)
    return tuple(t.to(device) for t in (src, lengths, prev, tgt))


def make_trees(encoder, lengths, width, seed):
    """The tree inputs that ``encoder`` reads (none for most rows), as
    ``translation_struct`` collates them, of random projective dependency
    trees of left-padded sources (one word per piece)."""
    wanted = tree_inputs_of(encoder)
    if not wanted:
        return {}
    rng = np.random.default_rng(seed)
    trees = [encode_piece_tree(random_projective_heads(n, rng) if n else [], np.arange(n))
             for n in (lengths - 1).tolist()]  # words before EOS
    return batch_tree_inputs(trees, wanted, left_pad=True, width=width)


class Runner:
    """One model, its optimizer and batch; ``train_step`` and ``infer_step``."""

    def __init__(self, row: BenchRow, settings, dictionary, device):
        self.row = row
        torch.manual_seed(settings.seed)
        self.model = build_model(row, settings, dictionary).to(device)
        # --fp16 / --bf16 as fairseq's FP16Optimizer does it: the model in half
        # precision, Adam on float32 master copies (Adam's eps underflows in half precision)
        self.master = None
        if settings.half is not None:
            self.model = self.model.to(settings.half)
            self.master = [p.detach().float().requires_grad_() for p in self.model.parameters()]
        self.optimizer = torch.optim.Adam(self.master or self.model.parameters(), lr=1e-4)
        self.src, self.lengths, self.prev, self.tgt = make_batch(settings, dictionary, device)
        trees = make_trees(self.model.encoder, self.lengths.cpu(), self.src.size(1), settings.seed)
        self.trees = {k: v.to(device) for k, v in trees.items()}
        self.generator = SequenceGenerator(
            [self.model], dictionary, beam_size=4, max_len_a=0,
            max_len_b=settings.decode_steps, min_len=settings.decode_steps,
        )
        self.device = device

    def train_step(self) -> None:
        """One update, queued (the timer waits for the device), its phases named for the profiler."""
        self.model.train()
        with record_function("phase: forward"):
            logits = self.model(self.src, self.lengths, self.prev, **self.trees)[0]
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), self.tgt.view(-1))
        with record_function("phase: backward"):
            loss.backward()
        with record_function("phase: optimizer"):
            if self.master is None:
                self.optimizer.step()
            else:
                self._master_step()
            self.optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _master_step(self):
        """The half-precision gradients to the float32 masters, Adam, the masters back."""
        params = list(self.model.parameters())
        for master, p in zip(self.master, params):
            master.grad = None if p.grad is None else p.grad.float()
        self.optimizer.step()
        for master, p in zip(self.master, params):
            p.copy_(master)
            p.grad = None

    @torch.no_grad()
    def infer_step(self) -> None:
        """One no-grad forward in eval mode, queued."""
        self.model.eval()
        self.model(self.src, self.lengths, self.prev, **self.trees)

    @torch.no_grad()
    def decode_step(self) -> Tuple[float, float]:
        """Sentences per second of beam search with a fixed number of steps,
        and the seconds of it spent in the encoder."""
        self.model.eval()
        encoder, in_encoder = self.model.encoder, []
        forward = encoder.forward

        def timed_forward(*args, **kwargs):  # fairseq's generator calls encoder.forward itself
            synchronize(self.device)
            begin = time.perf_counter()
            out = forward(*args, **kwargs)
            synchronize(self.device)
            in_encoder.append(time.perf_counter() - begin)
            return out

        encoder.forward = timed_forward
        try:
            start = time.perf_counter()
            net_input = {"src_tokens": self.src, "src_lengths": self.lengths, **self.trees}
            self.generator.generate([self.model], {"net_input": net_input})
            synchronize(self.device)
            elapsed = time.perf_counter() - start
        finally:
            del encoder.forward
        return self.src.size(0) / elapsed, sum(in_encoder)


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _tensor_bytes(runner: "Runner") -> int:
    """Parameters and optimizer state: what lives between updates."""
    state = [v for values in runner.optimizer.state.values() for v in values.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in [*runner.model.parameters(), *(runner.master or ()), *state])


def _cpu_peak_memory(row: BenchRow, settings) -> float:
    """In a fresh process: parameters + optimizer state + the resident-set
    peak of one update above what the process held just before it."""
    torch.set_num_threads(settings.threads)
    libc = ctypes.CDLL("libc.so.6")
    runner = Runner(row, settings, stand_in_dictionary(settings.vocab), torch.device("cpu"))
    runner.train_step()  # optimizer state and runtime caches now exist
    gc.collect()
    libc.malloc_trim(0)
    before = _proc_status_bytes("VmRSS:")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset the peak resident set (VmHWM)
    runner.train_step()
    return (_tensor_bytes(runner) + _proc_status_bytes("VmHWM:") - before) / 2**20


def measure_memory(rows: List[BenchRow], settings, device) -> Dict[str, float]:
    if device.type == "cuda":
        peaks = {}
        dictionary = stand_in_dictionary(settings.vocab)
        for row in rows:
            onlstm_cuda_graphs.clear()  # the ON-LSTM's graph buffers are the row's that made them
            torch.cuda.empty_cache()
            runner = Runner(row, settings, dictionary, device)
            runner.train_step()
            torch.cuda.reset_peak_memory_stats(device)
            runner.train_step()
            peaks[row.label] = torch.cuda.max_memory_allocated(device) / 2**20
            del runner
            torch.cuda.empty_cache()
        return peaks
    if not os.path.exists("/proc/self/clear_refs"):
        return {}
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    context = multiprocessing.get_context("spawn")
    peaks = {}
    for row in rows:
        with context.Pool(1) as pool:
            peaks[row.label] = pool.apply(_cpu_peak_memory, (row, settings))
    return peaks


def sdpa_backends(step) -> Dict[str, int]:
    """How many of the ``scaled_dot_product_attention`` calls of ``step()``
    went to each backend, by PyTorch's own dispatch rule for their arguments
    (``torch._fused_sdp_choice``)."""
    counts: Dict[str, int] = {}
    fused = F.scaled_dot_product_attention

    def counting(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        backend = SDPBackend(torch._fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal)).name
        counts[backend] = counts.get(backend, 0) + 1
        return fused(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    F.scaled_dot_product_attention = counting  # the module attribute every caller looks up
    try:
        step()
    finally:
        F.scaled_dot_product_attention = fused
    return counts


def measure_time(rows: List[BenchRow], settings, device, timer: Timer) -> dict:
    """Each row's per-update and per-inference seconds in every repeat
    (:func:`.timing.interleaved`), the beam search's figures, and the rows
    that could not run here."""
    dictionary = stand_in_dictionary(settings.vocab)

    def start(row):
        runner = Runner(row, settings, dictionary, device)
        backends = sdpa_backends(runner.train_step)  # warm-up
        runner.infer_step()
        return runner, backends

    started, failed = first_calls({row.label: functools.partial(start, row) for row in rows},
                                  {row.label: row.baseline for row in rows})
    runners = {label: runner for label, (runner, _) in started.items()}
    decode = {"decode": {label: [] for label in runners}, "decode_encoder": {label: [] for label in runners}}

    def after_train(label):
        if settings.decode:
            speed, in_encoder = runners[label].decode_step()
            decode["decode"][label].append(speed)
            decode["decode_encoder"][label].append(in_encoder)
        else:
            runners[label].infer_step()  # untimed, in the search's place: the first use of the updated weights

    steps = {label: {"train": runner.train_step, "infer": runner.infer_step} for label, runner in runners.items()}
    calls, times = interleaved(steps, settings.repeats, settings.min_repeat_ms / 1000, timer, after_train)
    times.update(decode)
    return {"times": times, "calls": calls, "failed": failed,
            "backends": {label: backends for label, (_, backends) in started.items()},
            "params": {label: sum(p.numel() for p in runner.model.parameters()) for label, runner in runners.items()}}


def chosen_rows(text: str) -> List[BenchRow]:
    """The rows ``--rows`` names (default: those run by default), with their baselines, in :data:`ROWS`' order."""
    wanted = text.split(",") if text else [row.label for row in ROWS if row.by_default]
    unknown = set(wanted) - set(ROW_BY_LABEL)
    if unknown:
        raise SystemExit(f"unknown --rows {sorted(unknown)}; choose from {[r.label for r in ROWS]}")
    needed = {"stock"}
    for label in wanted:  # a row, its baseline, the baseline's baseline ...
        needed.add(label)
        while label != "stock":
            label = ROW_BY_LABEL[label].baseline
            needed.add(label)
    return [row for row in ROWS if row.label in needed]


def resolve_config(settings):
    """``--batch`` and ``--length`` from ``--config`` where they are not given."""
    batch, length = CONFIGS[settings.config]
    settings.batch = settings.batch or batch
    settings.length = settings.length or length
    return settings


def run(settings, timer: Optional[Timer] = None) -> dict:
    """Measure the ``--rows`` at ``--config``'s batch; where the GPU runs out
    of memory, every row again at half the batch (the report lists each try)."""
    resolve_config(settings)
    device = torch.device(settings.device)
    torch.set_num_threads(settings.threads)
    rows = chosen_rows(settings.rows)
    timer = timer or Timer.for_device(device)
    out_of_memory = []
    while True:
        try:
            measured = measure_time(rows, settings, device, timer)
            if "stock" in measured["failed"]:
                raise SystemExit(f"the stock row did not run: {measured['failed']['stock']}")
            ran = [row for row in rows if row.label in measured["params"]]
            peaks = measure_memory(ran, settings, device) if settings.memory else {}
            break
        except torch.OutOfMemoryError as error:
            if settings.batch == 1:
                raise
            out_of_memory.append({"batch": settings.batch, "error": "; ".join(
                [str(error).splitlines()[0]] + getattr(error, "__notes__", []))})
        onlstm_cuda_graphs.clear()  # after the except clause, which held the frames of the tensors
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        settings.batch //= 2
    times, results = measured["times"], []
    for row in ran:
        label, base = row.label, row.baseline
        entry = {**asdict(row), "params": measured["params"][label],
                 "sdpa_backends_in_training": measured["backends"][label]}
        for phase in PHASES:
            entry.update(phase_figures(phase, times[phase][label], times[phase][base], measured["calls"][label][phase]))
        if settings.decode:
            speed = statistics.median(times["decode"][label])
            entry.update({
                "decode_sent_per_s": speed,
                "decode_ratio": speed / statistics.median(times["decode"][base]),
                "decode_ratio_per_repeat": per_repeat_ratios(times["decode"][label], times["decode"][base]),
                "decode_encoder_ms": 1000 * statistics.median(times["decode_encoder"][label]),
            })
        if label in peaks:
            entry["peak_mb"] = peaks[label]
            entry["peak_ratio"] = peaks[label] / peaks[base]
        results.append(entry)
    dtype = str(settings.half or torch.float32).replace("torch.", "")
    report = {
        "settings": {**vars(settings), "half": None if settings.half is None else dtype},
        "torch": torch.__version__,
        "device": str(device),
        "dtype": dtype,
        "threads": torch.get_num_threads(),
        "out_of_memory": out_of_memory,
        "failed": measured["failed"],
        "rows": results,
    }
    off = next((r for r in results if r["label"] == "posattn-off"), None)
    if off is not None:
        report["posattn_off_outside"] = {phase: outside_band(off[f"{phase}_ratio_per_repeat"]) for phase in PHASES}
    return report


def format_table(report: dict) -> str:
    """One line per row: its times, ratios to its baseline and their range over
    the repeats, K (train/infer); then what went wrong (:func:`.verdict.run_notes`)."""
    decode = "decode_ratio" in report["rows"][0]
    header = (f"{'row':<21} {'params':>11} {TIME_COLUMNS} " + (f"{'decode/s':>9} {'x base':>7} {'enc ms':>7} " if decode
                                                               else "") + f"{'peak MB':>8} {'x base':>7}  base")
    lines = [header, "-" * len(header)]
    for r in report["rows"]:
        peak = f"{r['peak_mb']:8.0f} {r['peak_ratio']:7.2f}" if "peak_mb" in r else f"{'-':>8} {'-':>7}"
        lines.append(f"{r['label']:<21} {r['params']:>11,} {time_cells(r)} "
                     + (f"{r['decode_sent_per_s']:9.1f} {r['decode_ratio']:7.2f} {r['decode_encoder_ms']:7.1f} "
                        if decode else "") + f"{peak}  {r['baseline']}")
    used = [f"{r['label']} " + "+".join(f"{n}x{name}" for name, n in sorted(r["sdpa_backends_in_training"].items()))
            for r in report["rows"] if r.get("sdpa_backends_in_training")]
    if used:
        lines.append("scaled_dot_product_attention's backend in a training update (calls x backend): " + "; ".join(used))
    return "\n".join(lines + run_notes(report))


def _label_parts(model) -> list:
    """Forward hooks that open a profiler range ``part: NAME`` around each
    layer of the model's parts; returns their handles."""
    encoder = model.encoder
    parts = {"decoder": [model.decoder], "encoder SAN layers": list(getattr(encoder, "layers", [])),
             "encoder recurrent layers": list(getattr(encoder, "recurrent_layers", [])),
             "encoder embeddings": [encoder.embed_tokens]}
    handles, open_ranges = [], {}

    def leave(module, args, output):
        open_ranges.pop(module).__exit__(None, None, None)

    for name, modules in parts.items():
        def enter(module, args, name=name):
            open_ranges[module] = record_function(f"part: {name}").__enter__()

        for module in modules:
            handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


def _profiled(step, updates: int, device) -> tuple:
    """The profiler's averages over ``updates`` calls of ``step``, and the total time of each ``phase: ...``
    and ``part: ...`` range in them."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(updates):
            step()
            synchronize(device)
    averages = prof.key_averages()
    return averages, {e.key: e.cpu_time_total for e in averages if e.key.startswith(("phase: ", "part: "))}


def _time_line(name: str, microseconds: float, per: int, total: float) -> str:
    return f"  {name[:60]:<60} {microseconds / 1000 / per:9.1f} ms  {microseconds / total:6.1%}"


def _costliest_operators(averages, per: int, total: float, count: int = 15) -> List[str]:
    """The ``count`` operators of most self time, in ms per ``per`` and as a share of
    ``total``; on CUDA also the ``count`` of most time on the GPU, as a share of theirs."""
    operators = [e for e in averages if not e.key.startswith(("phase: ", "part: ", "ProfilerStep"))]
    lines = ["costliest operators (self time):"]
    lines += [_time_line(e.key, e.self_cpu_time_total, per, total)
              for e in sorted(operators, key=lambda e: -e.self_cpu_time_total)[:count]]
    on_gpu = sum(e.self_device_time_total for e in operators)
    if on_gpu > 0:
        lines.append(f"  on the GPU (self device time): {on_gpu / 1000 / per:.1f} ms")
        lines += [_time_line(e.key, e.self_device_time_total, per, on_gpu)
                  for e in sorted(operators, key=lambda e: -e.self_device_time_total)[:count]]
    return lines


def profile_row(row: BenchRow, settings, device, updates: int = 3) -> str:
    """Profile ``updates`` training updates of ``row``, then as many no-grad
    forward passes of its encoder (what decoding runs once per batch); return a report."""
    torch.set_num_threads(settings.threads)
    runner = Runner(row, settings, stand_in_dictionary(settings.vocab), device)
    runner.train_step()  # warm-up: optimizer state, scripted functions
    handles = _label_parts(runner.model)
    averages, ranges = _profiled(runner.train_step, updates, device)
    total = sum(v for k, v in ranges.items() if k.startswith("phase: "))
    lines = [f"profile of {row.label} ({row.arch}), {updates} updates, {total / 1000 / updates:.1f} ms per update"]
    lines += [_time_line(key, ranges[key], updates, total)
              for key in sorted(ranges, key=lambda k: (not k.startswith("phase: "), -ranges[k]))]
    prefix = "autograd::engine::evaluate_function: "
    backward = sorted((e for e in averages if e.key.startswith(prefix)), key=lambda e: -e.cpu_time_total)
    lines.append("costliest backward functions (total time):")
    lines += [_time_line(e.key[len(prefix):], e.cpu_time_total, updates, total) for e in backward[:8]]
    lines += _costliest_operators(averages, updates, total)

    runner.model.eval()

    @torch.no_grad()
    def encode():
        with record_function("phase: encoder, no grad"):
            runner.model.encoder(runner.src, runner.lengths, **runner.trees)

    encode()  # warm-up: inference's own state
    averages, ranges = _profiled(encode, updates, device)
    for handle in handles:
        handle.remove()
    total = ranges["phase: encoder, no grad"]
    lines.append(f"encoder without gradients (as decoding runs it), {updates} passes, "
                 f"{total / 1000 / updates:.1f} ms per pass")
    lines += [_time_line(key, ranges[key], updates, total)
              for key in sorted(ranges, key=lambda k: -ranges[k]) if key.startswith("part: encoder")]
    lines += _costliest_operators(averages, updates, total, count=10)
    return "\n".join(lines)


def add_size_arguments(parser) -> None:
    """The model's size, the threads and the seed (also ``fairseq-posattn-bench-compile``'s)."""
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--ffn-dim", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--max-positions", type=int, default=256,
                        help="--max-source-positions; at most the P/R/conv1d table size t (256)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=1)


def get_parser():
    parser = argparse.ArgumentParser(prog="fairseq-posattn-bench",
                                     description=__doc__.split("\n\n")[0])
    comparisons = ", ".join(row.label for row in ROWS if not row.by_default)
    parser.add_argument("--rows", default="", help=f"comma-separated row labels (default: all but the kernel "
                        f"comparisons {comparisons}); stock and each row's baseline always run")
    parser.add_argument("--config", choices=CONFIGS, default="default",
                        help="the batch: " + ", ".join(f"{name} B={b} x T={t}" for name, (b, t) in CONFIGS.items())
                        + " (wmt: a WMT14 batch of 16k tokens; if the GPU runs out of memory, every row again at "
                          "half the batch); --batch and --length override it")
    parser.add_argument("--batch", type=int, default=None, help="sentences per batch (B; default: --config's)")
    parser.add_argument("--length", type=int, default=None, help="source/target length (T; default: --config's)")
    add_size_arguments(parser)
    add_timing_arguments(parser, repeats=5, calls="updates (and K' inferences)")
    parser.add_argument("--no-decode", dest="decode", action="store_false",
                        help="skip the timed beam search (training, inference and memory only)")
    parser.add_argument("--decode-steps", type=int, default=16,
                        help="target length of the timed beam search")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_precision_arguments(parser, "half", None, "model in {0}, Adam on float32 master weights as fairseq's --{1}")
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="skip the peak-memory measurement")
    parser.add_argument("--profile", default="", metavar="LABEL",
                        help="profile a few updates of this row instead of benchmarking")
    return parser


def main(argv=None):
    """Run the benchmark; returns the report (or the profile's text)."""
    settings = get_parser().parse_args(argv)
    if settings.profile:
        if settings.profile not in ROW_BY_LABEL:
            raise SystemExit(f"unknown --profile {settings.profile!r}; choose from {list(ROW_BY_LABEL)}")
        report = profile_row(ROW_BY_LABEL[settings.profile], resolve_config(settings), torch.device(settings.device))
        print(report)
        return report
    report = run(settings)
    print(
        f"--config {settings.config}: B={settings.batch} T={settings.length} d={settings.embed_dim} ffn={settings.ffn_dim} "
        f"heads={settings.heads} layers={settings.layers}+{settings.layers} vocab={settings.vocab} "
        f"device={report['device']} {report['dtype']} threads={report['threads']} torch={report['torch']}, "
        f"median of {settings.repeats} interleaved repeats of at least {settings.min_repeat_ms:g} ms"
    )
    return finish(report, format_table(report), settings.json)


cli_main = console_script(main)

if __name__ == "__main__":
    cli_main()
