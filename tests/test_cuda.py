"""The CUDA paths: every architecture of the benchmark computes on a GPU what it
computes on the CPU (float32, TF32 off: loss, every gradient, the no-grad
forward), runs finite in float16 and under fp16 autocast, and takes the fused
kernel in the same layers; the ON-LSTM's definition agrees with the CPU in float64; fairseq-train and fairseq-generate
run with ``--fp16``.  Skipped without a CUDA device (``scripts/gpu_check.sh``
runs this module and the benchmark on a GPU)."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_MODEL_ARGS, USER_DIR, load_record, recorded_train_command, run, run_cli
from test_attention import FUSED_LAYERS, count_fused_layers
from test_recurrent import HIDDEN

from fairseq_posattn.bench import models as bench
from fairseq_posattn.models.from_flags import stand_in_dictionary
from fairseq_posattn.modules import PositionAwareSelfAttention
from fairseq_posattn.kernels import manual
from fairseq_posattn.modules.recurrent import ONLSTM

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
SIZE = ["--batch", "4", "--length", "12", "--embed-dim", "32", "--ffn-dim", "64", "--heads", "4",
        "--layers", "2", "--vocab", "60", "--max-positions", "64"]
LABELS = [row.label for row in bench.ROWS]


@pytest.fixture(autouse=True)
def exact_float32():
    """TF32 matmuls and convolutions would differ from the CPU by ~1e-3."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def model_and_batch(label):
    """A small model of the benchmark row ``label`` (CPU, float32) and its batch."""
    settings = bench.get_parser().parse_args(SIZE)
    row = bench.ROW_BY_LABEL[label]
    dictionary = stand_in_dictionary(settings.vocab)
    torch.manual_seed(0)
    model = bench.build_model(row, settings, dictionary, ["--dropout", "0"])
    src, lengths, prev, tgt = bench.make_batch(settings, dictionary, torch.device("cpu"))
    trees = bench.make_trees(model.encoder, lengths, src.size(1), settings.seed)
    return model, (src, lengths, prev, tgt), trees


def loss_and_grads(model, batch, trees, device, autocast=None):
    """The training path (the model has no dropout): the log-probabilities,
    the loss and every gradient, on the CPU."""
    model.to(device).train()
    model.zero_grad(set_to_none=True)
    src, lengths, prev, tgt = (t.to(device) for t in batch)
    trees = {name: t.to(device) for name, t in trees.items()}
    with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
        logits = model(src, lengths, prev, **trees)[0]
    logprobs = F.log_softmax(logits.float(), -1)
    loss = F.nll_loss(logprobs.view(-1, logprobs.size(-1)), tgt.view(-1))
    loss.backward()
    # copies: moving the model moves its .grad tensors in place
    grads = {name: p.grad.float().cpu().clone() for name, p in model.named_parameters()
             if p.grad is not None}
    return logprobs.detach().cpu().clone(), loss.detach().cpu().clone(), grads


# what runs Triton kernels: the flags' value triton, and the candidates (all of them Triton's)
TRITON = {"triton"} | {candidate.name for candidate in manual.CANDIDATES}


@contextlib.contextmanager
def cpu_paths(model):
    """Layers asked for a CUDA-only kernel take the CPU's paths meanwhile: attention
    layers on Triton kernels the explicit path, ON-LSTM layers on Triton kernels ``auto``'s."""
    switched = [(m, "explicit") for m in model.modules()
                if isinstance(m, PositionAwareSelfAttention) and m.kernel in TRITON]
    switched += [(m, "auto") for m in model.modules() if isinstance(m, ONLSTM) and m.kernel in TRITON]
    kernels = [m.kernel for m, _ in switched]
    for m, kernel in switched:
        m.kernel = kernel
    try:
        yield
    finally:
        for (m, _), kernel in zip(switched, kernels):
            m.kernel = kernel


@pytest.mark.parametrize("label", LABELS)
def test_cuda_float32_equals_cpu(label):
    model, batch, trees = model_and_batch(label)
    with cpu_paths(model):
        cpu = loss_and_grads(model, batch, trees, "cpu")
    gpu = loss_and_grads(model, batch, trees, CUDA)
    torch.testing.assert_close(gpu[0], cpu[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gpu[1], cpu[1], atol=1e-5, rtol=1e-5)
    assert gpu[2].keys() == cpu[2].keys()
    for name in cpu[2]:
        torch.testing.assert_close(gpu[2][name], cpu[2][name], atol=1e-4, rtol=1e-3, msg=name)
    with torch.no_grad():  # inference: the fused kernel where every term is a score term
        src, lengths, prev, _ = batch
        model.eval()
        on_gpu = model(src.to(CUDA), lengths.to(CUDA), prev.to(CUDA),
                       **{k: t.to(CUDA) for k, t in trees.items()})[0].cpu()
        model.cpu()
        with cpu_paths(model):
            on_cpu = model(src, lengths, prev, **trees)[0]
    torch.testing.assert_close(on_gpu, on_cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("how", ["half-module", "fp16-autocast"])
@pytest.mark.parametrize("label", LABELS)
def test_cuda_half_precision_is_finite_and_close(label, how):
    model, batch, trees = model_and_batch(label)
    reference = loss_and_grads(model, batch, trees, CUDA)
    if how == "half-module":
        half = loss_and_grads(model.half(), batch, trees, CUDA)
    else:
        half = loss_and_grads(model, batch, trees, CUDA, autocast=torch.float16)
    assert torch.isfinite(half[0]).all() and torch.isfinite(half[1])
    assert all(torch.isfinite(g).all() for g in half[2].values())
    assert (half[0] - reference[0]).abs().max() < 0.05
    assert abs(float(half[1] - reference[1])) < 0.02


@pytest.mark.parametrize("flags", sorted(FUSED_LAYERS), ids=" ".join)
def test_cuda_takes_the_fused_kernel_where_the_cpu_does(flags):
    assert count_fused_layers(flags, CUDA) == FUSED_LAYERS[flags]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("flags", sorted(FUSED_LAYERS), ids=" ".join)
def test_in_half_precision_cuda_trains_score_terms_in_the_fused_kernel(flags, dtype):
    """``auto`` in fp16/bf16 on CUDA: every layer without probability or value
    terms takes the fused kernel in training too (``explicit`` keeps its own)."""
    explicit = "explicit" in flags
    expected = FUSED_LAYERS[flags] if explicit or FUSED_LAYERS[flags][1] == 0 else (3, 3)
    assert count_fused_layers(flags, CUDA, dtype) == expected


@pytest.mark.parametrize("bidirectional", [True, False])
def test_onlstm_reference_on_cuda_equals_cpu(bidirectional):
    """The ON-LSTM's definition in float64, sentences ending early: the same
    output and gradients on the GPU as on the CPU (the fast path against it:
    test_onlstm_triton.py)."""
    torch.manual_seed(0)
    rnn = ONLSTM(6, HIDDEN, bidirectional=bidirectional, chunk_size=2, kernel="reference").double()
    x = torch.randn(5, 3, 6, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1])
    results = []
    for device in ("cpu", CUDA):
        rnn.to(device).zero_grad()
        xi = x.clone().to(device).requires_grad_()  # a leaf on each device
        y = rnn(xi, lengths)
        y.sum().backward()
        # copies: moving the module to the GPU moves its gradients' storage too
        results.append([t.detach().to("cpu", copy=True) for t in (y, xi.grad, *[p.grad for p in rnn.parameters()])])
    for cpu, gpu in zip(*results):
        torch.testing.assert_close(gpu, cpu, atol=1e-10, rtol=1e-9)


def train_args(data, arch, save, *extra):
    recurrent_layers = ["--encoder-recurrent-layers", "1"] if arch == "onlstm_san_transformer" else []
    return [data, "--user-dir", USER_DIR, "--task", "translation_struct", "--arch", arch,
            *TINY_MODEL_ARGS, *recurrent_layers, "--optimizer", "adam", "--lr", "1e-3",
            "--max-tokens", "1000", "--seed", "1", "--save-dir", save, "--no-progress-bar",
            "--num-workers", "0", "--no-epoch-checkpoints", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["--fp16", "--bf16"])
@pytest.mark.parametrize("arch", ["transformer_struct", "onlstm_san_transformer"])
def test_fairseq_train_and_generate_in_half_precision(toy_struct_bin, tmp_path, arch, precision):
    save = tmp_path / "ckpt"
    run_cli("fairseq-train", *train_args(toy_struct_bin, arch, save, "--max-update", "8", precision))
    out = run_cli("fairseq-generate", toy_struct_bin, "--user-dir", USER_DIR,
                  "--task", "translation_struct", "--path", save / "checkpoint_last.pt",
                  "--gen-subset", "test", "--beam", "2", precision, "--num-workers", "0")
    assert sum(line.startswith("H-") for line in out.stdout.splitlines()) == 10


@pytest.mark.slow
@pytest.mark.parametrize("half, rel", [("fp16", 1e-2), ("bf16", 2e-2)])
@pytest.mark.parametrize("arch", ["transformer_struct", "onlstm_san_transformer"])
def test_first_half_precision_loss_is_the_float32_loss(toy_struct_bin, tmp_path, arch, half, rel):
    """The same seed without dropout: the first update's loss with and without
    --fp16 (--bf16) agrees to about 1e-2 (2e-2: bf16 keeps 8 bits of mantissa)."""
    losses = {}
    for name, precision in (("fp32", []), (half, [f"--{half}"])):
        record = tmp_path / f"{name}.pt"
        run(recorded_train_command(record, *train_args(
            toy_struct_bin, arch, tmp_path / name, "--max-update", "1", "--dropout", "0",
            *precision)))
        loss, sample_size, _ = load_record(record)["steps"][0]
        losses[name] = loss / sample_size
    assert losses[half] == pytest.approx(losses["fp32"], rel=rel)
