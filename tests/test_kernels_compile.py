"""Every Triton kernel of the package compiles for a GPU, on a machine without one.

Triton's interpreter (which the other kernel tests use on the CPU) runs a
kernel as Python and never meets the compiler: a kernel can pass there and
fail to compile, as the first persistent ON-LSTM kernels did on Triton 3.6.
Triton compiles for a named target without a device (its wheel brings
``ptxas``).  So a subprocess without the interpreter calls each kernel's
wrapper on CPU tensors, forward and backward, with the launch replaced by a
record of its arguments (the persistent ON-LSTM told it runs on a
132-multiprocessor GPU, as an H100 or H200), and compiles every distinct
launch for ``sm_90``: the ON-LSTM at d=512 (chunk size 1 and 4, per step and
persistent, float16 and float32), Shaw's relative attention with two
position sets and dropout, and the 1d and 2d convolved attention, in
float16.  The kernels that must compile are found by walking
``fairseq_posattn.kernels``: every ``triton.jit`` function that reads its
program id and that no other one calls.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

COMPILE = textwrap.dedent('''
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    import importlib
    import pkgutil
    import re

    import fairseq_posattn.kernels as package
    from fairseq_posattn.kernels import onlstm_triton
    from fairseq_posattn.kernels.candidates import onlstm_persistent
    from fairseq_posattn.kernels.candidates.convolved_1d import convolved_attention_1d
    from fairseq_posattn.kernels.convolved_2d import convolved_attention_2d
    from fairseq_posattn.kernels.shaw_flash import bucket_dtype, shaw_flash_attention

    def kernels():
        """The package's launched kernels: jit functions that read their program id and that no other one calls."""
        jitted = {}
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            for value in vars(importlib.import_module(info.name)).values():
                if isinstance(value, JITFunction):
                    jitted[f"{value.fn.__module__}.{value.fn.__name__}"] = value
        sources = [fn.src for fn in jitted.values()]
        return {name for name, fn in jitted.items() if "tl.program_id" in fn.src
                and not any(re.search(rf"(?<![\\w.]){fn.fn.__name__}\\(", src) for src in sources if src != fn.src)}

    TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "i8",
             torch.int32: "i32", torch.int64: "i64", torch.bool: "i1", torch.uint8: "u8"}
    launches = {}

    def source(fn, args, kwargs):
        """What ``fn[grid](*args, **kwargs)`` compiles: a tensor is a 16-byte
        aligned pointer to its dtype (as torch allocates), an int an int32."""
        values = dict(zip(fn.arg_names, args), **kwargs)
        signature, constants = {}, {}
        for i, name in enumerate(fn.arg_names):
            value = values[name]
            if fn.params[i].is_constexpr or value is None:
                signature[name], constants[(i,)] = "constexpr", value
            elif isinstance(value, torch.Tensor):
                signature[name] = "*" + TYPES[value.dtype]
            else:
                signature[name] = {bool: "i1", int: "i32", float: "fp32"}[type(value)]
        aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                   if signature[name].startswith("*")}
        return ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=aligned)

    def record(self, *args, grid, warmup, **kwargs):
        key = (f"{self.fn.__module__}.{self.fn.__name__}", tuple(sorted((k, str(v)) for k, v in kwargs.items())),
               tuple(str(a.dtype) if isinstance(a, torch.Tensor) else type(a).__name__ for a in args))
        launches.setdefault(key, (self, args, kwargs))

    print("kernels", " ".join(sorted(kernels())))
    JITFunction.run = record
    onlstm_persistent._multiprocessors = lambda device: 132  # no other way to ask for the one-launch form

    hidden, rows = 512, 32
    for chunk in (1, 4):
        for dtype in (torch.float16, torch.float32):
            gates = 4 * hidden + 2 * (hidden // chunk)
            xs = torch.randn(2, 3 * rows, hidden, dtype=dtype)
            w_ih, w_hh = (torch.randn(2, hidden, gates, dtype=dtype) for _ in range(2))
            bias = torch.zeros(2, 1, gates, dtype=dtype)
            for forward, backward in ((onlstm_triton.onlstm_forward, onlstm_triton.onlstm_backward),
                                      (onlstm_persistent.onlstm_forward, onlstm_persistent.onlstm_backward)):
                forward(xs, w_ih, bias, w_hh, [rows] * 3, hidden, chunk, False)
                hs, acts, cells = forward(xs, w_ih, bias, w_hh, [rows] * 3, hidden, chunk, True)
                backward(torch.randn(hs.shape, dtype=dtype), w_hh, hs, acts, cells, [rows] * 3, hidden, chunk)

    batch, heads, length, head_dim = 2, 4, 24, 64
    q, k, v = (torch.randn(batch, heads, length, head_dim, dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    pads = torch.zeros(batch, length, dtype=torch.bool)
    sets = [(torch.randint(0, 2 * clip + 1, (batch, length, length)).to(bucket_dtype(clip)),
             torch.randn(2 * clip + 1, head_dim, dtype=torch.float16, requires_grad=True),
             torch.randn(2 * clip + 1, head_dim, dtype=torch.float16, requires_grad=True)) for clip in (16, 8)]
    shaw_flash_attention(q, k, v, pads, sets, dropout_p=0.1, seed=1).float().sum().backward()
    logits = torch.randn(batch, heads, length, length, dtype=torch.float16, requires_grad=True)
    convolved_attention_2d(logits, pads, torch.randn(heads, 1, 3, 3, requires_grad=True),
                           torch.randn(heads, requires_grad=True), 0.1, 1, torch.float16).float().sum().backward()
    convolved_attention_1d(logits, pads, torch.randn(heads, 3, length, length, requires_grad=True),
                           torch.randn(heads, length, requires_grad=True), 0.1, 1,
                           torch.float16).float().sum().backward()

    for (name, *_), (fn, args, kwargs) in launches.items():
        triton.compile(source(fn, args, kwargs), target=GPUTarget("cuda", 90, 32))
        print("compiled", name)
''')


def test_every_kernel_compiles_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    kernels = next(line.split()[1:] for line in lines if line.startswith("kernels "))
    compiled = {line.split()[1] for line in lines if line.startswith("compiled ")}
    assert len(kernels) >= 10 and compiled == set(kernels), done.stdout
