"""The one table of kernels (``fairseq_posattn.kernels.manual``) against
what faces the user: the flags' choices and help, the build log, the manual's
tables, and the values removed in 0.3.0, refused on every route (the command
line, the model build, a saved checkpoint) with their CHANGELOG entry."""

import argparse
import logging
import re
import types
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_posattn.kernels import manual
from fairseq_posattn.models.from_flags import build_model_from_flags, parse_model_flags, stand_in_dictionary
from fairseq_posattn.models.transformer_posattn import PositionAwareTransformerModel
from fairseq_posattn.modules import kernel_choice

DOCS = Path(__file__).resolve().parent.parent / "docs"
TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16",
        "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--encoder-layers", "1", "--decoder-layers", "1"]
# (arch, flag, value): the values removed in 0.3.0
REMOVED = [("onlstm_san_transformer", "--encoder-recurrent-kernel", "persistent"),
           ("onlstm_san_transformer", "--encoder-recurrent-kernel", "graph"),
           ("onlstm_san_transformer", "--encoder-recurrent-kernel", "compile"),
           ("transformer_posattn_conv1d", "--encoder-attention-kernel", "triton")]
REFUSAL = r"{flag} {value} was removed (for the layers conv1d_triton computes )?in 0\.3\.0 \(CHANGELOG\.md\): "


def dest(flag):
    return flag[2:].replace("-", "_")


@pytest.mark.parametrize("arch, flag, value", [case for case in REMOVED if case[2] != "triton"])
def test_the_command_line_refuses_a_removed_value_naming_the_changelog(arch, flag, value, capsys):
    with pytest.raises(SystemExit):
        parse_model_flags(["--arch", arch, *TINY, flag, value])
    assert re.search(f"argument {flag}: " + REFUSAL.format(flag=flag, value=value), capsys.readouterr().err)


@pytest.mark.parametrize("arch, flag, value", REMOVED)
def test_a_model_or_checkpoint_with_a_removed_value_is_refused_and_loads_with_the_override(arch, flag, value,
                                                                                          tmp_path):
    """What reaches the model without the command line (hydra, the hub, a
    checkpoint's options) is refused at build with the same message, which
    names the ``--model-overrides`` that loads such a checkpoint; with it,
    the checkpoint loads with its weights."""
    if value == "triton":
        pytest.importorskip("triton")
    args, model = build_model_from_flags(["--arch", arch, *TINY], 20)
    setattr(args, dest(flag), value)  # as a checkpoint of an older release holds it
    refusal = REFUSAL.format(flag=flag, value=value) + r".* --model-overrides \"\{'" + dest(flag) + "': 'auto'\\}\""
    with pytest.raises(ValueError, match=refusal):
        ARCH_MODEL_REGISTRY[arch].build_model(args, types.SimpleNamespace(
            source_dictionary=stand_in_dictionary(20), target_dictionary=stand_in_dictionary(20)))
    path = tmp_path / "checkpoint.pt"
    history = {"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam", "lr_scheduler_state": {},
               "num_updates": 0}
    torch.save({"args": args, "model": model.state_dict(), "optimizer_history": [history],
                "extra_state": {"train_iterator": None}}, path)
    task = types.SimpleNamespace(source_dictionary=stand_in_dictionary(20), target_dictionary=stand_in_dictionary(20))
    task.build_model = lambda cfg: ARCH_MODEL_REGISTRY[cfg.arch].build_model(cfg, task)
    with pytest.raises(ValueError, match=refusal):
        checkpoint_utils.load_model_ensemble([str(path)], task=task)
    (loaded,), _ = checkpoint_utils.load_model_ensemble([str(path)], arg_overrides={dest(flag): "auto"}, task=task)
    for (name, got), expected in zip(loaded.state_dict().items(), model.state_dict().values()):
        assert torch.equal(got, expected), name


def flag_help(flag: str) -> str:
    parser = argparse.ArgumentParser()
    PositionAwareTransformerModel.add_args(parser)
    return " ".join(parser.format_help().split())


@pytest.mark.parametrize("layer", [manual.ATTENTION, manual.RECURRENCE])
def test_the_flags_offer_the_tables_options_with_its_help(layer):
    """The flag's choices are the table's options, its help names every kernel
    of the layer and where ``auto`` takes it; no candidate and no removed value
    is offered."""
    flag = manual.FLAGS[layer]
    text = flag_help(flag)
    assert f"{flag} {{{','.join(manual.OPTIONS[layer])}}}" in text
    assert " ".join(manual.help_text(layer).split()) in text
    for kernel in manual.KERNELS:
        if kernel.layer == layer:
            assert f"{kernel.name} {' '.join(kernel.auto.split())}" in text or not kernel.auto
            assert kernel.name in text
    for removed in ("persistent", "graph", "compile", "onlstm_persistent", "conv1d_triton"):
        assert removed not in manual.OPTIONS[layer]


@pytest.mark.parametrize("arch, attention", [
    ("onlstm_san_transformer", {"cpu": "sdpa", "cuda": "sdpa"}),  # no attention term
    ("transformer_posattn_p", dict.fromkeys(["cpu", "cuda"], "layer 1 explicit (sdpa in inference), layer 2 sdpa")),
    ("transformer_struct", {"cpu": "explicit", "cuda": "shaw_triton"}),  # Shaw keys and values
])
def test_the_build_log_names_the_kernel_each_layer_runs_here(arch, attention, caplog):
    """The kernel each layer runs on this machine's device in float32 (for
    attention in training, and in inference where that differs), not auto's
    rules."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with caplog.at_level(logging.INFO, logger="fairseq_posattn.models.encoder"):
        build_model_from_flags(["--arch", arch, *TINY, "--encoder-layers", "2"], 20)
    here = f"auto, in float32 on {device.type}: "
    assert f"2 self-attention layers, --encoder-attention-kernel {here}{attention[device.type]}\n" in caplog.text
    if arch.startswith("onlstm"):
        recurrence = kernel_choice.recurrent_kernel("auto", device, torch.float32)
        assert f"3 ON-LSTM layers, --encoder-recurrent-kernel {here}{recurrence}\n" in caplog.text
    assert not any(kernel.auto in caplog.text for kernel in manual.KERNELS)


def docs_tables():
    """``{(page, first line): table}``: the markdown tables of docs/ whose header starts with ``| kernel |``."""
    tables = {}
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text().split("\n")
        for i, line in enumerate(lines):
            if line.startswith("| kernel |") and (i == 0 or not lines[i - 1].startswith("|")):
                end = i
                while end < len(lines) and lines[end].startswith("|"):
                    end += 1
                tables[(page.name, i + 1)] = "\n".join(lines[i:end])
    return tables


def test_the_manuals_kernel_tables_are_the_kernel_manuals():
    """Every table of kernels in docs/ is one that ``python -m
    fairseq_posattn.kernels`` prints (paste it anew after a change), and each
    of those is in some page."""
    generated = {what or "candidate": manual.markdown_table(what) for what in (manual.ATTENTION,
                                                                                manual.RECURRENCE, None)}
    found = docs_tables()
    for where, table in found.items():
        assert table in generated.values(), (f"docs/{where[0]}:{where[1]}: a table of kernels that is not "
                                             "python -m fairseq_posattn.kernels's (paste it anew)")
    for what, table in generated.items():
        assert table in found.values(), f"no page of docs/ has the table of {what} kernels"
