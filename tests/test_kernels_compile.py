"""The ON-LSTM's Triton kernels compile for a GPU, on a machine without one.

Triton's interpreter (which the other kernel tests use on the CPU) runs a
kernel as Python and never meets the compiler: a kernel can pass there and
fail to compile, as the first persistent kernels did on Triton 3.6.  Triton
compiles for a named target without a device (its wheel brings ``ptxas``),
so here each kernel is compiled for an H100/H200 (``sm_90``) at the shapes
the benchmarks run (d=512, chunk size 1 and 4), in float16 and float32, in
a subprocess without the interpreter.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

COMPILE = textwrap.dedent('''
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from fairseq_posattn.modules.onlstm import triton_steps as ts

    def compile_for_gpu(fn, pointers, constants):
        """``fn`` for sm_90: ``pointers`` the element type of each pointer
        argument (16-byte aligned, as torch allocates), the other runtime
        arguments int32."""
        signature = {name: "constexpr" if name in constants else pointers.get(name, "i32") for name in fn.arg_names}
        aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if name in pointers}
        source = ASTSource(fn=fn, signature=signature, attrs=aligned,
                           constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()})
        triton.compile(source, target=GPUTarget("cuda", 90, 32))

    hidden = 512
    for chunk in (1, 4):
        for half in ("fp16", "fp32"):
            precision = "ieee" if half == "fp32" else "tf32"
            shape = ts._shape(hidden, chunk)
            gates = dict(x_ptr=half, rec_ptr=half, act_ptr="fp32", c_prev_ptr="fp32", c_ptr="fp32", h_ptr=half,
                         gh_ptr=half, dc_ptr="fp32", dg_ptr=half, w_ptr=half, z_ptr="fp32", step_ptr="i32",
                         flags_ptr="i32")
            for fn in (ts._step_forward, ts._step_backward, ts._recurrence_forward, ts._recurrence_backward):
                pointers = {name: "*" + gates[name] for name in fn.arg_names if name.endswith("_ptr")}
                if fn is ts._recurrence_backward:
                    pointers["rec_ptr"] = "*fp32"  # its scratch
                constants = {name: value for name, value in dict(
                    shape, HAS_PREV=True, HAS_REC=True, SAVE=True, PROGRAMS=24, BLOCK_P=32, BLOCK_N=128,
                    BLOCK_H=32, BLOCK_K=64, BLOCK_B=64, MATMUL=True, CELL=True, ONE_LAUNCH=True, PRECISION=precision,
                ).items() if name in fn.arg_names}
                compile_for_gpu(fn, pointers, constants)
                print("compiled", fn.fn.__name__, half, "chunk", chunk)
''')


def test_the_onlstm_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("compiled") == 16, done.stdout
