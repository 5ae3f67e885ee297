"""fairseq's standard flags on every named architecture: applied or refused, never ignored.

fairseq's encoder flags (``EncDecBaseConfig`` and ``TransformerConfig``) over
every architecture of ``transformer_posattn`` (fairseq's
``ARCH_MODEL_NAME_REGISTRY``) at a tiny size: each is seen in the built model
or refused when it is built, with a message that names it.  Then LayerDrop,
activation checkpointing and quant noise at work in the recurrent layers,
and ``fairseq-train`` with fairseq's defaults on every architecture.
"""

import json
import re
from argparse import Namespace
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Optional, Sequence

import pytest
import torch
import torch.nn.functional as F
from fairseq import quantization_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.modules import LayerDropModuleList, LearnedPositionalEmbedding
from fairseq.modules.quant_noise import quant_noise
from torch import nn

import fairseq_posattn  # noqa: F401  (registers the archs)
from fairseq_posattn.models.from_flags import parse_model_flags, stand_in_dictionary
from fairseq_posattn.modules import PositionAttentionConfig, PositionAwareSelfAttention
from fairseq_posattn.modules.quant_noise import quant_noise_on
from fairseq_posattn.modules.recurrent import RecurrentLayer

from conftest import COMMON_ARGS, USER_DIR, run_python

ARCHS = sorted(arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items()
               if model == "transformer_posattn")
# sizes only: every architecture keeps its layers and options
TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--decoder-layers", "1", "--interaction-max-len", "16"]
VOCAB = 20


def arch_defaults(arch: str) -> Namespace:
    """The options ``arch`` sets when the command line sets none."""
    args = Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def build(arch: str, flags: Sequence[str] = (), overrides: Optional[dict] = None):
    """``(args, model)`` of ``arch`` at the tiny size, in eval mode (LayerDrop
    keeps every layer); ``overrides`` are set after parsing, as fairseq's
    ``--model-overrides`` sets them when it loads a checkpoint."""
    args = parse_model_flags(["--arch", arch, *TINY, *flags])
    vars(args).update(overrides or {})
    dictionary = stand_in_dictionary(VOCAB)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return args, ARCH_MODEL_REGISTRY[arch].build_model(args, task).eval()


def layers(encoder) -> list:
    """Every layer of the encoder: self-attention, then recurrent."""
    return [*encoder.layers, *encoder.recurrent_layers]


def layerdrop_lists(model, args) -> bool:
    """fairseq's ``LayerDropModuleList`` with the case's p for every stack of layers."""
    return all(isinstance(stack, LayerDropModuleList) and stack.p == 0.5
               for stack in (model.encoder.layers, model.encoder.recurrent_layers) if len(stack))


def checkpointed(offload: bool):
    """fairseq's ``checkpoint_wrapper`` on every layer (its forward: ``partial(_, forward, offload)``)."""
    def applied(model, args):
        return all(hasattr(layer, "precheckpoint_forward") and layer.forward.args[1] is offload
                   for layer in layers(model.encoder))
    return applied


def weight_matrices(encoder) -> list:
    """The weights quant noise acts on: every ``nn.Linear`` of the self-attention
    layers (fairseq's), every weight matrix of the recurrent layers."""
    matrices = []
    for layer in layers(encoder):
        if isinstance(layer, RecurrentLayer):
            matrices += [layer.get_parameter(name) for name in layer.weight_matrices()]
        else:
            matrices += [m.weight for m in layer.modules() if isinstance(m, nn.Linear)]
    return matrices


def noised_in_blocks(block_size: int):
    """One training-mode call of every quant-noise hook rewrites every weight
    matrix of every layer; zeros come in whole blocks of ``block_size`` input
    features (axis 1), and at least one block twice as wide is not whole."""
    def applied(model, args):
        encoder = model.encoder
        matrices = weight_matrices(encoder)
        encoder.train()
        before = [w.detach().clone() for w in matrices]
        torch.manual_seed(0)
        for module in encoder.modules():
            for hook in module._forward_pre_hooks.values():
                hook(module, ())
        blocks = [(w == 0).unflatten(1, (-1, block_size)) for w in matrices]
        halves = [(w == 0).unflatten(1, (-1, 2 * block_size)) for w in matrices
                  if w.size(1) % (2 * block_size) == 0]
        return (all(not torch.equal(w, b) for w, b in zip(matrices, before))
                and all(torch.equal(z.all(2), z.any(2)) for z in blocks)
                and any(not torch.equal(z.all(2), z.any(2)) for z in halves))
    return applied


def scalar_quantized(model, args) -> bool:
    """fairseq's scalar quantization (``task.build_model``) replaces every
    ``nn.Linear`` of the encoder, and every attention calls its projections."""
    quantization_utils.quantize_model_scalar(model, args)
    encoder = model.encoder
    return (not any(type(m) is nn.Linear for m in encoder.modules())
            and not any(m.plain_projections for m in encoder.modules()
                        if isinstance(m, PositionAwareSelfAttention)))


def never(model, args) -> bool:
    return False


@dataclass
class FlagCase:
    flags: Sequence[str]
    applied: Callable  # (model, args) -> bool: the flag is seen in the built model
    refused_when: Callable = lambda arch: False  # (the arch's defaults) -> bool
    overrides: dict = field(default_factory=dict)

    @property
    def flag(self) -> str:
        """The flag under test: the last one of ``flags`` and ``overrides``."""
        named = [flag for flag in self.flags if flag.startswith("--")]
        return [*named, *("--" + name.replace("_", "-") for name in self.overrides)][-1]


def has_recurrent_layers(arch):
    return arch.encoder_recurrent_layers > 0


CASES = {
    "layerdrop": FlagCase(["--encoder-layerdrop", "0.5"], layerdrop_lists),
    "checkpoint-activations": FlagCase(["--checkpoint-activations"], checkpointed(offload=False)),
    "offload-activations": FlagCase(["--offload-activations"], checkpointed(offload=True)),
    "quant-noise-pq": FlagCase(["--quant-noise-pq", "0.25"], noised_in_blocks(8)),
    "quant-noise-pq-block-size": FlagCase(["--quant-noise-pq", "0.25", "--quant-noise-pq-block-size", "16"],
                                          noised_in_blocks(16)),
    "quant-noise-pq-block-size-5": FlagCase(["--quant-noise-pq", "0.25", "--quant-noise-pq-block-size", "5"],
                                            never, refused_when=lambda arch: True),
    "quant-noise-scalar": FlagCase(["--quant-noise-scalar", "0.5"], scalar_quantized,
                                   refused_when=has_recurrent_layers),
    "encoder-learned-pos": FlagCase(
        ["--encoder-learned-pos"],
        lambda model, args: isinstance(model.encoder.embed_positions, LearnedPositionalEmbedding),
        refused_when=lambda arch: arch.encoder_position_embedding == "none"),
    "no-token-positional-embeddings": FlagCase(
        ["--no-token-positional-embeddings"],
        lambda model, args: model.encoder.embed_positions is None and model.decoder.embed_positions is None,
        refused_when=lambda arch: arch.encoder_position_embedding == "concat"),
    "layernorm-embedding": FlagCase(["--layernorm-embedding"],
                                    lambda model, args: model.encoder.layernorm_embedding is not None),
    "no-scale-embedding": FlagCase(["--no-scale-embedding"], lambda model, args: model.encoder.embed_scale == 1.0),
    "encoder-normalize-before": FlagCase(
        ["--encoder-normalize-before"],
        lambda model, args: model.encoder.layer_norm is not None
        and all(layer.normalize_before for layer in model.encoder.layers)),
    # LayerDrop's pruning (Fan et al. 2019) is asked for when a checkpoint is loaded: fairseq
    # 0.12's own command line parses the flag into a list that its build_model cannot split
    "encoder-layers-to-keep": FlagCase([], lambda model, args: len(model.encoder.layers) == 1,
                                       refused_when=has_recurrent_layers,
                                       overrides={"encoder_layers_to_keep": "0"}),
    "encoder-xformers-att-config": FlagCase(["--encoder-xformers-att-config", '{"name": "scaled_dot_product"}'],
                                            never, refused_when=lambda arch: True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("arch", ARCHS)
def test_every_encoder_flag_is_applied_or_refused(arch, case):
    """Applied: seen in the built model.  Refused: a ValueError naming the flag
    where the architecture cannot honour it (the cases' ``refused_when``)."""
    if case.refused_when(arch_defaults(arch)):
        with pytest.raises(ValueError, match=re.escape(case.flag)):
            build(arch, case.flags, case.overrides)
    else:
        args, model = build(arch, case.flags, case.overrides)
        assert case.applied(model, args), f"{arch} ignores {case.flag}"


@pytest.mark.parametrize("arch, flags, message", [
    ("onlstm_san_transformer", ["--quant-noise-pq", "0.1", "--encoder-recurrent-hidden-dim", "12"],
     "--quant-noise-pq-block-size 8 does not divide the 12 input features of the recurrent weights "
     "(--encoder-recurrent-hidden-dim) of the ON-LSTM layers"),
    ("transformer_lstm6", ["--quant-noise-pq", "0.1", "--encoder-recurrent-hidden-dim", "20"],
     "--quant-noise-pq-block-size 8 does not divide the 20 input features of the recurrent weights "
     "(--encoder-recurrent-hidden-dim) of the LSTM layers"),
    ("transformer_posattn", ["--quant-noise-pq", "0.1", "--encoder-ffn-embed-dim", "36"],
     "--quant-noise-pq-block-size 8 does not divide the 36 input features of the self-attention "
     "layers' second feed-forward layer (--encoder-ffn-embed-dim)"),
    ("transformer_posattn", ["--encoder-position-embedding", "concat", "--no-token-positional-embeddings"],
     "--no-token-positional-embeddings would remove"),
    ("transformer_posattn", ["--encoder-learned-pos", "--no-token-positional-embeddings"],
     "--encoder-learned-pos makes the encoder's position embeddings learned, but "
     "--no-token-positional-embeddings removes them"),
])
def test_refusals_name_the_flag_and_the_layer(arch, flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(arch, flags)


def test_layerdrop_drops_recurrent_layers_in_training_only():
    """fairseq's LayerDrop (Fan et al. 2019): each training forward skips each
    recurrent layer with probability p; evaluation runs them all."""
    _, model = build("onlstm_san_transformer", ["--encoder-layerdrop", "0.5"])
    ran = []
    for index, layer in enumerate(model.encoder.recurrent_layers):
        layer.register_forward_pre_hook(lambda module, inputs, index=index: ran.append(index))
    tokens = torch.randint(4, VOCAB, (2, 6))
    lengths = torch.tensor([6, 6])

    def layers_run(training, seed):
        ran.clear()
        model.train(training)
        torch.manual_seed(seed)
        model.encoder(tokens, lengths)
        return tuple(ran)

    assert all(layers_run(False, seed) == (0, 1, 2) for seed in range(4))
    trained = [layers_run(True, seed) for seed in range(4)]
    assert any(len(run) < 3 for run in trained)
    assert layers_run(True, 0) == trained[0]  # the seed decides


# the GPU cases run in scripts/gpu_check.sh (-k cuda)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_activation_checkpointing_gives_the_same_gradients(cell, device):
    """--checkpoint-activations and --offload-activations recompute every layer
    in the backward (dropout's masks included): the same loss, the same gradients."""
    tokens = torch.randint(4, VOCAB, (3, 7), device=device)
    tokens[1, :2] = 1  # left padding
    lengths = tokens.ne(1).sum(1)
    results = []
    for flags in ([], ["--checkpoint-activations"], ["--offload-activations"]):
        torch.manual_seed(0)
        _, model = build("onlstm_san_transformer", ["--encoder-recurrent-cell", cell, "--dropout", "0.2", *flags])
        model.to(device).train()
        torch.manual_seed(1)
        loss = model(tokens, lengths, tokens)[0].sum()
        loss.backward()
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()}))
    for loss, grads in results[1:]:
        torch.testing.assert_close(loss, results[0][0])
        assert grads.keys() == results[0][1].keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, results[0][1][name], msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_quant_noise_changes_recurrent_outputs_in_training_only(cell, device):
    """--quant-noise-pq in a recurrent layer: no change in evaluation, noise in training."""
    x = torch.randn(5, 2, 16, device=device)
    lengths = torch.tensor([5, 3])
    plain, noised = (build("transformer_lstm6", ["--encoder-recurrent-cell", cell, "--dropout", "0",
                                                 "--quant-noise-pq", noise])[1].encoder.recurrent_layers[0]
                     .to(device) for noise in ("0", "0.5"))
    noised.load_state_dict(plain.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(noised.eval()(x, lengths), plain.eval()(x, lengths))
        torch.testing.assert_close(plain.train()(x, lengths), plain.eval()(x, lengths))
        assert not torch.allclose(noised.train()(x, lengths), plain(x, lengths))


def test_quant_noise_reaches_the_position_terms_projection():
    """Bilan & Roth's query projection W^r gets fairseq's quant noise as the attention's own do."""
    _, model = build("transformer_posattn", ["--query-relative-positions", "--quant-noise-pq", "0.25"])
    assert noised_in_blocks(8)(model, None)


def test_scalar_quantization_reaches_the_temperature_projections():
    """After fairseq's scalar quantization (``--quant-noise-scalar``) the
    learnable temperature calls the q, k, v projections, now ``IntLinear``
    modules, instead of reading their weights."""
    args, model = build("transformer_posattn_temp", ["--quant-noise-scalar", "0.5"])
    quantization_utils.quantize_model_scalar(model, args)
    attention = model.encoder.layers[0].self_attn
    called = []
    for proj in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj):
        # IntLinear's forward and its activation quantizer (a forward hook) run
        # on CUDA only; the call is what counts here
        proj._forward_hooks.clear()
        proj.forward = lambda x, proj=proj: called.append(proj) or F.linear(x, proj.weight, proj.bias)
    attention(torch.randn(5, 2, 16))
    assert called == [attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj]


def test_recurrent_quant_noise_is_fairseqs_on_a_linear():
    """On an ``nn.Linear``, :func:`quant_noise_on` draws fairseq's mask and
    writes fairseq's weights."""
    linears = []
    for noise in (lambda m: quant_noise(m, 0.3, 4), lambda m: quant_noise_on(m, ["weight"], 0.3, 4)):
        torch.manual_seed(0)
        linear = noise(nn.Linear(8, 6))
        torch.manual_seed(1)
        linear.train()(torch.randn(2, 8))
        linears.append(linear.weight.detach())
    torch.testing.assert_close(linears[0], linears[1], rtol=0, atol=0)


@pytest.mark.parametrize("arch", [arch for arch in ARCHS if PositionAttentionConfig.from_namespace(
    arch_defaults(arch)).uses_position_tables()])
def test_tables_bound_an_unset_max_source_positions(arch):
    """fairseq's default --max-source-positions (1024) exceeds the P, R and
    conv1d tables (t = 256): unset, it is t; given larger, it is refused;
    clamped tables leave fairseq's default."""
    assert parse_model_flags(["--arch", arch]).max_source_positions == 256
    assert parse_model_flags(["--arch", arch, "--interaction-max-len", "64"]).max_source_positions == 64
    assert not hasattr(parse_model_flags(["--arch", arch, "--interaction-overflow", "clamp"]),
                       "max_source_positions")
    with pytest.raises(ValueError, match="smaller than --max-source-positions 1024"):
        build(arch, ["--max-source-positions", "1024"])


# every run of the loop is fairseq-train's own entry point with its own argv
TRAIN_LOOP = """
import json, sys
from fairseq_cli.train import cli_main

for argv in json.loads(sys.argv[1]):
    print("ARCH", argv[argv.index("--arch") + 1], flush=True)
    sys.argv = ["fairseq-train", *argv]
    cli_main()
"""


@pytest.mark.slow
def test_every_architecture_trains_with_fairseqs_defaults(toy_data_bin, toy_struct_bin, tmp_path):
    """fairseq-train with only --arch, the usual optimizer flags and a tiny
    size: P, R, P+R and conv1d bound --max-source-positions by their tables."""
    sizes = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
             "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--decoder-layers", "1"]
    runs = []
    for arch in ARCHS:
        trees = PositionAttentionConfig.from_namespace(arch_defaults(arch)).uses_structure()
        data, task = (toy_struct_bin, "translation_struct") if trees else (toy_data_bin, "translation")
        runs.append([str(data), "--user-dir", str(USER_DIR), "--task", task, "--arch", arch, *sizes,
                     "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "1",
                     "--save-dir", str(tmp_path / arch), "--no-progress-bar", *COMMON_ARGS])
    out = run_python(TRAIN_LOOP, json.dumps(runs), timeout=600).stdout
    trained = re.findall(r"^ARCH (\S+)$(?:(?!^ARCH ).)*?done training", out, re.M | re.S)
    assert trained == ARCHS
