"""fairseq's standard flags on every named architecture: applied or refused, never ignored.

fairseq's encoder flags (``EncDecBaseConfig`` and ``TransformerConfig``) over
every architecture whose model is the plugin's (fairseq's
``ARCH_MODEL_NAME_REGISTRY``) at a tiny size: ``transformer_posattn``'s and
the evaluation models', each through its task and the data of its tests.
Each flag is seen in the built model, or refused when it is built with a
message that names it, or refused by the model's parser (the tagger has none
of them).  Then LayerDrop, activation checkpointing and quant noise at work
in the recurrent layers, checkpointing with batch normalisation, and
``fairseq-train`` with fairseq's defaults on every translation architecture.
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
from fairseq import options, quantization_utils, tasks
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
from test_logic_inference import TRAIN_MAX, logic_data  # noqa: F401  (fixture)
from test_pos_tagging import treebank  # noqa: F401  (fixture)
from test_relation_classification import toy_tacred  # noqa: F401  (fixture)

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
    keeps every layer), built as fairseq's ``task.build_model`` builds it
    (then scalar quantization); ``overrides`` are set after parsing, as
    fairseq's ``--model-overrides`` sets them when it loads a checkpoint."""
    args = parse_model_flags(["--arch", arch, *TINY, *flags])
    vars(args).update(overrides or {})
    dictionary = stand_in_dictionary(VOCAB)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return args, quantization_utils.quantize_model_scalar(model, args).eval()


@dataclass
class EvaluationModel:
    """An evaluation model's task, the data fixture of its tests and a tiny size."""
    task: str
    data_fixture: str
    size: Sequence[str]
    takes_encoder_flags: bool = True  # fairseq's encoder flags are options of its parser


EVALUATION_MODELS = {
    "posattn_tagger": EvaluationModel(
        "pos_tagging", "treebank",
        ["--max-piece-length", "12", "--word-embed-dim", "8", "--char-embed-dim", "8"],
        takes_encoder_flags=False),
    "sentence_pair_classifier": EvaluationModel(
        "logic_inference", "logic_data",
        ["--max-train-operators", str(TRAIN_MAX), "--encoder-embed-dim", "16",
         "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2"]),
    "relation_classifier": EvaluationModel(
        "relation_classification", "toy_tacred",
        ["--encoder-embed-dim", "32", "--pos-tag-embed-dim", "4", "--ner-tag-embed-dim", "4",
         "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2"]),
}
# every architecture whose model class is the plugin's: a new model fails the walk
# until it is added here or to transformer_posattn
PLUGIN_ARCHS = sorted(arch for arch, model in ARCH_MODEL_REGISTRY.items()
                      if model.__module__.startswith("fairseq_posattn."))


def model_name(arch: str) -> str:
    return ARCH_MODEL_NAME_REGISTRY[arch]


def build_any(request, arch: str, flags: Sequence[str] = (), overrides: Optional[dict] = None):
    """``(args, model)`` of any of :data:`PLUGIN_ARCHS`: the translation
    models as :func:`build` builds them, an evaluation model as fairseq-train
    does (its parser, ``tasks.setup_task``, ``task.build_model``) on the data
    of its tests, at a tiny size and in eval mode."""
    if model_name(arch) == "transformer_posattn":
        return build(arch, flags, overrides)
    model = EVALUATION_MODELS[model_name(arch)]
    data = request.getfixturevalue(model.data_fixture)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", str(USER_DIR), "--task", model.task, "--arch", arch,
        *model.size, *flags])
    vars(args).update(overrides or {})
    task = tasks.setup_task(args)
    return args, task.build_model(args).eval()


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
    """fairseq's scalar quantization (``task.build_model``) replaced every
    ``nn.Linear`` of the encoder, and every attention calls its projections."""
    encoder = model.encoder
    return (not any(type(m) is nn.Linear for m in encoder.modules())
            and not any(m.plain_projections for m in encoder.modules()
                        if isinstance(m, PositionAwareSelfAttention)))


def never(model, args) -> bool:
    return False


def without_position_embeddings(model, args) -> bool:
    """The encoder, and the decoder of a translation model, have none."""
    return all(part.embed_positions is None
               for part in (model.encoder, getattr(model, "decoder", model.encoder)))


@dataclass
class FlagCase:
    flags: Sequence[str]
    applied: Callable  # (model, args) -> bool: the flag is seen in the built model
    refused_when: Callable = lambda arch: False  # (arch name) -> bool
    overrides: dict = field(default_factory=dict)

    @property
    def flag(self) -> str:
        """The flag under test: the last one of ``flags`` and ``overrides``."""
        named = [flag for flag in self.flags if flag.startswith("--")]
        return [*named, *("--" + name.replace("_", "-") for name in self.overrides)][-1]

    @property
    def on_command_line(self) -> bool:
        return not self.overrides


def has_recurrent_layers(arch: str) -> bool:
    return getattr(arch_defaults(arch), "encoder_recurrent_layers", 0) > 0


def position_embedding(arch: str) -> str:
    return arch_defaults(arch).encoder_position_embedding


def always(arch: str) -> bool:
    return True


CASES = {
    "layerdrop": FlagCase(["--encoder-layerdrop", "0.5"], layerdrop_lists),
    "checkpoint-activations": FlagCase(["--checkpoint-activations"], checkpointed(offload=False)),
    "offload-activations": FlagCase(["--offload-activations"], checkpointed(offload=True)),
    "quant-noise-pq": FlagCase(["--quant-noise-pq", "0.25"], noised_in_blocks(8)),
    "quant-noise-pq-block-size": FlagCase(["--quant-noise-pq", "0.25", "--quant-noise-pq-block-size", "16"],
                                          noised_in_blocks(16)),
    "quant-noise-pq-block-size-5": FlagCase(["--quant-noise-pq", "0.25", "--quant-noise-pq-block-size", "5"],
                                            never, refused_when=always),
    "quant-noise-scalar": FlagCase(["--quant-noise-scalar", "0.5"], scalar_quantized,
                                   refused_when=has_recurrent_layers),
    "encoder-learned-pos": FlagCase(
        ["--encoder-learned-pos"],
        lambda model, args: isinstance(model.encoder.embed_positions, LearnedPositionalEmbedding),
        refused_when=lambda arch: position_embedding(arch) == "none"),
    "no-token-positional-embeddings": FlagCase(
        ["--no-token-positional-embeddings"], without_position_embeddings,
        refused_when=lambda arch: position_embedding(arch) == "concat"),
    "layernorm-embedding": FlagCase(["--layernorm-embedding"],
                                    lambda model, args: model.encoder.layernorm_embedding is not None),
    "no-scale-embedding": FlagCase(["--no-scale-embedding"], lambda model, args: model.encoder.embed_scale == 1.0),
    "encoder-normalize-before": FlagCase(
        ["--encoder-normalize-before"],
        lambda model, args: model.encoder.layer_norm is not None
        and all(layer.normalize_before for layer in model.encoder.layers),
        # Bilan & Roth's layer (single residual, batch norm) is post-norm
        refused_when=lambda arch: model_name(arch) == "relation_classifier"),
    # LayerDrop's pruning (Fan et al. 2019) is asked for when a checkpoint is loaded: fairseq
    # 0.12's own command line parses the flag into a list that its build_model cannot split
    "encoder-layers-to-keep": FlagCase(["--encoder-layers", "2"],
                                       lambda model, args: len(model.encoder.layers) == 1,
                                       refused_when=has_recurrent_layers,
                                       overrides={"encoder_layers_to_keep": "0"}),
    "encoder-xformers-att-config": FlagCase(["--encoder-xformers-att-config", '{"name": "scaled_dot_product"}'],
                                            never, refused_when=always),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("arch", PLUGIN_ARCHS)
def test_every_encoder_flag_is_applied_or_refused(arch, case, request, capsys):
    """Applied: seen in the built model.  Refused: by the parser of a model
    that has none of fairseq's encoder flags, or with a ValueError naming the
    flag where the architecture cannot honour it (the cases' ``refused_when``)."""
    evaluation_model = EVALUATION_MODELS.get(model_name(arch))
    if case.on_command_line and evaluation_model and not evaluation_model.takes_encoder_flags:
        with pytest.raises(SystemExit):
            build_any(request, arch, case.flags)
        assert re.search("unrecognized arguments: .*" + re.escape(case.flag), capsys.readouterr().err)
    elif case.refused_when(arch):
        with pytest.raises(ValueError, match=re.escape(case.flag)):
            build_any(request, arch, case.flags, case.overrides)
    else:
        args, model = build_any(request, arch, case.flags, case.overrides)
        assert case.applied(model, args), f"{arch} ignores {case.flag}"


@pytest.mark.parametrize("arch, flags, message", [
    ("bilan_roth_relation", ["--encoder-normalize-before"],
     "the relation classifier's encoder layer is post-norm: drop --encoder-normalize-before"),
    ("bilan_roth_relation", ["--activation-fn", "gelu"],
     "--activation-fn gelu has no effect with --encoder-ffn-activation rrelu"),
    ("logic_san", ["--encoder-layerdrop", "0.5", "--distributed-world-size", "2", "--ddp-backend", "pytorch_ddp"],
     "--encoder-layerdrop skip whole layers, whose parameters then get no gradient, which "
     "--ddp-backend pytorch_ddp refuses: add --find-unused-parameters"),
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
def test_refusals_name_the_flag_and_the_layer(arch, flags, message, request):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_any(request, arch, flags)


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


def assert_checkpointing_changes_no_step(build_model: Callable, loss_of: Callable, **close) -> None:
    """One training step of ``build_model(flags)`` without checkpointing, with
    --checkpoint-activations and with --offload-activations: the same loss,
    the same gradients (within ``close``), the same buffers after it (running statistics)."""
    steps = []
    for flags in ([], ["--checkpoint-activations"], ["--offload-activations"]):
        torch.manual_seed(0)
        model = build_model(flags).train()
        torch.manual_seed(1)
        loss = loss_of(model)
        loss.backward()
        steps.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()},
                      dict(model.named_buffers())))
    plain_loss, plain_grads, plain_buffers = steps[0]
    for loss, grads, buffers in steps[1:]:
        torch.testing.assert_close(loss, plain_loss)
        assert grads.keys() == plain_grads.keys() and buffers.keys() == plain_buffers.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, plain_grads[name], msg=name, **close)
        for name, buffer in buffers.items():
            torch.testing.assert_close(buffer, plain_buffers[name], msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_activation_checkpointing_gives_the_same_gradients(cell, device):
    """--checkpoint-activations and --offload-activations recompute every layer
    in the backward (dropout's masks included): the same loss, the same
    gradients (on CUDA to 1e-4: cuDNN's LSTM weight gradients vary from run to
    run, as an H200 showed)."""
    tokens = torch.randint(4, VOCAB, (3, 7), device=device)
    tokens[1, :2] = 1  # left padding
    lengths = tokens.ne(1).sum(1)
    assert_checkpointing_changes_no_step(
        lambda flags: build("onlstm_san_transformer",
                            ["--encoder-recurrent-cell", cell, "--dropout", "0.2", *flags])[1].to(device),
        lambda model: model(tokens, lengths, tokens)[0].sum(),
        **(dict(atol=1e-4, rtol=1e-4) if device == "cuda" else {}))


def relation_inputs(model, batch: int = 4, length: int = 7) -> dict:
    """Random inputs of the relation classifier (one row right-padded)."""
    def ids(table):
        return torch.randint(4, table.num_embeddings, (batch, length))

    tokens = ids(model.encoder.embed_tokens)
    tokens[1, -2:] = model.encoder.padding_idx
    return dict(src_tokens=tokens, pos_tags=ids(model.tag_embeddings["pos_tags"]),
                ner_tags=ids(model.tag_embeddings["ner_tags"]),
                subject_distances=torch.randint(-5, 6, (batch, length)),
                object_distances=torch.randint(-5, 6, (batch, length)))


def test_activation_checkpointing_moves_batch_norm_statistics_once(request):
    """Bilan & Roth's layer normalises over the batch (``bilan_roth_relation``);
    checkpointing runs its training forward twice, and its running statistics
    still move once per step (fairscale's ``patch_batchnorm``)."""
    torch.manual_seed(2)
    inputs = relation_inputs(build_any(request, "bilan_roth_relation")[1])
    assert_checkpointing_changes_no_step(
        lambda flags: build_any(request, "bilan_roth_relation", flags)[1],
        lambda model: model(**inputs)[0].sum())


def test_the_relation_encoder_takes_recurrent_layers(request):
    """The plugin's own encoder options reach the relation classifier's
    encoder too: --encoder-recurrent-layers (Hao et al. 2019)."""
    _, model = build_any(request, "relation_classifier", ["--encoder-recurrent-layers", "1"])
    assert len(model.encoder.recurrent_layers) == 1
    torch.manual_seed(2)
    assert model(**relation_inputs(model))[0].isfinite().all()


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
    _, model = build("transformer_posattn_temp", ["--quant-noise-scalar", "0.5"])
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
