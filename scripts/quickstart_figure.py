"""The quickstart's figure with the machine that gave it (docs/results.md).

    python3 scripts/quickstart_figure.py [--threads N] [--structure on|off | --arch NAME]
    python3 scripts/quickstart_figure.py --table
    python3 scripts/quickstart_figure.py --kernels

runs ``examples/quickstart/run.sh`` in a fresh work directory (it sets up
``.venv`` first, as it does for a user), then writes the test BLEU and the
exactly translated sentences, with the commit, the CPU, the instruction set
torch's kernels use there (``torch.backends.cpu.get_cpu_capability()``), the
torch version and the variables that force an instruction set, to
``docs/results/quickstart/`` (:func:`record_path`).
``--table`` prints docs/results.md's table of the committed files
(tests/test_results.py checks that the page holds it).  ``--kernels`` prints
which of the quickstart's float32 ops give other bits when torch's kernels,
MKL or oneDNN are forced to AVX2, or with 2 or 4 threads instead of one.  Only
the standard library: it runs before the environment exists."""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results" / "quickstart"
# what makes torch's own kernels, MKL and oneDNN pick another instruction set than the CPU's best
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile")
# run.sh's settings: the script sets the first three from its options; the rest keep their defaults
RUN_VARIABLES = ("THREADS", "STRUCTURE", "ARCH", "WORK", "MAX_UPDATE", "BPE_MERGES", "TRAIN_SIZE", "RETRAIN")
MACHINE = """import json, torch
print(json.dumps({"torch": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability()}))"""

# the quickstart's float32 ops on fixed inputs: {name: sha1 of the result's bytes}
KERNEL_BITS = """import hashlib, json, os, torch, torch.nn.functional as F
torch.set_num_threads(int(os.environ.get("THREADS", "1")))
g = torch.Generator().manual_seed(0)
x, w = torch.randn(512, 128, generator=g), torch.randn(128, 256, generator=g)
a, b = torch.randn(16, 40, 32, generator=g), torch.randn(16, 32, 40, generator=g)
t, q = torch.randn(64, 40, 37, generator=g) * 5, torch.randn(8, 4, 40, 32, generator=g)
mask = torch.zeros(8, 1, 40, 40).masked_fill(torch.arange(40) >= 35, float("-inf"))
tokens, grad, gain = torch.randn(4096, 128, generator=g), torch.randn(4096, 128, generator=g), torch.ones(128)
gain.requires_grad_()  # a weight's gradient sums over a batch's 4096 tokens
ops = {"mm": lambda: x @ w, "mm over tokens": lambda: tokens.t() @ grad,
       "layer_norm's weight gradient": lambda: torch.autograd.grad(
           (F.layer_norm(tokens, (128,), gain) * grad).sum(), gain)[0],
       "bmm": lambda: torch.bmm(a, b), "softmax": lambda: t.softmax(-1),
       "log_softmax": lambda: t.log_softmax(-1), "layer_norm": lambda: F.layer_norm(x, (128,)),
       "sum": lambda: t.sum(-1), "exp": lambda: t.exp(),
       "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=mask)}
print(json.dumps({k: hashlib.sha1(f().numpy().tobytes()).hexdigest() for k, f in ops.items()}))"""
KERNEL_SETTINGS = {"ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
                   "MKL_ENABLE_INSTRUCTIONS=AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                   "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
                   "2 threads": {"THREADS": "2"}, "4 threads": {"THREADS": "4"}}


def venv_python() -> str:
    return str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")


def kernel_bits(settings: dict) -> dict:
    """{op: sha1 of its result} in a fresh process with ``settings`` added to the environment."""
    env = {**{k: v for k, v in os.environ.items() if k not in ISA_VARIABLES + ("THREADS",)}, **settings}
    return json.loads(subprocess.run([venv_python(), "-c", KERNEL_BITS], env=env, check=True,
                                     capture_output=True, text=True).stdout)


def kernels() -> str:
    """The ops whose bits each of :data:`KERNEL_SETTINGS` changes (from one thread, nothing forced)."""
    base = kernel_bits({})
    lines = ["| setting | ops with other bits | ops with the same bits |", "|---|---|---|"]
    for name, settings in KERNEL_SETTINGS.items():
        bits = kernel_bits(settings)
        changed = [op for op in base if bits[op] != base[op]]
        lines.append(f"| {name} | {', '.join(changed) or '–'} | "
                     f"{', '.join(op for op in base if op not in changed) or '–'} |")
    return "\n".join(lines)


def figures(log: str) -> dict:
    """BLEU, exactly translated and test sentences, and sacreBLEU's signature from run.sh's output."""
    counted = re.search(r"^\[quickstart\] (\d+) test sentences, (\d+) translated exactly$", log, re.M)
    bleu = re.search(r"^\[quickstart\] BLEU = ([\d.]+) ", log, re.M)
    signature = re.search(r"^\[quickstart\] sacrebleu signature: (\S+)$", log, re.M)
    if not (counted and bleu and signature):
        raise SystemExit("quickstart_figure: run.sh's output lacks its BLEU, exact sentences or signature")
    return {"bleu": float(bleu[1]), "exact": int(counted[2]), "sentences": int(counted[1]),
            "signature": signature[1]}


def cpu() -> dict:
    """The CPU's model name, cores and the vector extensions that decide which kernels run (Linux)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = set(re.search(r"^flags\s*:\s*(.+)$", info, re.M)[1].split()) if model else set()
    return {"cpu": model[1].strip() if model else "unknown", "cores": os.cpu_count(),
            "cpu_flags": [flag for flag in CPU_FLAGS if flag in flags]}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def measure(settings: dict) -> dict:
    """One run of run.sh with ``settings`` in a fresh work directory; its figures and the machine."""
    with tempfile.TemporaryDirectory(prefix="quickstart-") as work:
        env = {**os.environ, **settings, "WORK": work}
        proc = subprocess.run(["bash", str(REPO / "examples" / "quickstart" / "run.sh")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stderr.write(proc.stdout)
        if proc.returncode != 0:
            raise SystemExit(f"quickstart_figure: run.sh failed (exit {proc.returncode})")
        found = figures(proc.stdout)
    machine = json.loads(subprocess.run([venv_python(), "-c", MACHINE], env=env, check=True,
                                        capture_output=True, text=True).stdout)
    return {**found, "settings": settings, "commit": git("rev-parse", "HEAD"),
            "changed_files": git("status", "--porcelain", "--untracked-files=no").splitlines(),
            "date": datetime.date.today().isoformat(), **cpu(), **machine,
            "isa_variables": {name: os.environ[name] for name in ISA_VARIABLES if name in os.environ}}


def model_name(settings: dict) -> str:
    if "ARCH" in settings:
        return settings["ARCH"]
    return "transformer_struct" if settings["STRUCTURE"] == "on" else "transformer_posattn-rel"


def record_path(record: dict) -> Path:
    """``<commit>.<model>.<threads>threads.<isa>[.<forced instruction sets>].<cpu>.json``"""
    forcing = record["isa_variables"].items()
    forced = "".join(f".{slug(name)}-{slug(value)}" for name, value in sorted(forcing))
    threads = record["settings"]["THREADS"]
    return RESULTS / (f"{record['commit'][:7]}.{model_name(record['settings'])}.{threads}threads."
                      f"{record['isa'].lower()}{forced}.{slug(record['cpu'])}.json")


def records() -> list:
    return [json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))]


def table(found: list) -> str:
    """docs/results.md's table: one row per committed run."""
    lines = ["| model | commit | CPU | torch's kernels | forced | threads | test BLEU | exact sentences |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(found, key=lambda r: (model_name(r["settings"]), r["date"], r["cpu"], r["isa"],
                                          int(r["settings"]["THREADS"]), sorted(r["isa_variables"].items()))):
        forced = ", ".join(f"`{k}={v}`" for k, v in sorted(r["isa_variables"].items())) or "–"
        lines.append(f"| `{model_name(r['settings'])}` | {r['commit'][:7]} ({r['date']}) | {r['cpu']} | "
                     f"{r['isa']} | {forced} | {r['settings']['THREADS']} | {r['bleu']:.2f} | "
                     f"{r['exact']}/{r['sentences']} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (run.sh's THREADS; default 1)")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--structure", choices=("on", "off"), default="on", help="run.sh's STRUCTURE")
    model.add_argument("--arch", help="run.sh's ARCH (another architecture)")
    parser.add_argument("--table", action="store_true", help="print the table of the committed runs and stop")
    parser.add_argument("--kernels", action="store_true",
                        help="print the ops whose bits another instruction set or threads change, and stop")
    args = parser.parse_args(argv)
    if args.table or args.kernels:
        print(table(records()) if args.table else kernels())
        return
    overridden = [name for name in RUN_VARIABLES if name in os.environ]
    if overridden:
        parser.error(f"unset {', '.join(overridden)}: the figure is run.sh's defaults in a fresh work "
                     "directory (--threads, --structure and --arch choose the rest)")
    settings = {"THREADS": str(args.threads)}
    settings.update({"ARCH": args.arch} if args.arch else {"STRUCTURE": args.structure})
    record = measure(settings)
    path = record_path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"BLEU {record['bleu']:.2f}, {record['exact']}/{record['sentences']} exact: {path}")


if __name__ == "__main__":
    main()
