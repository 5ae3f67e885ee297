"""Encoder-only models take the encoder's flags, not the decoder's."""

import pytest
from fairseq import options

import fairseq_posattn  # noqa: F401  (registers the models)


def option_strings(task, arch):
    """The flags fairseq-train accepts with this task and arch (parse_args_and_arch
    adds the task's and the model's to the parser)."""
    parser = options.get_training_parser()
    options.parse_args_and_arch(parser, ["<data>", "--task", task, "--arch", arch])
    return {s for action in parser._actions for s in action.option_strings}


@pytest.mark.parametrize("task, arch", [
    ("logic_inference", "logic_onlstm_san"),
    ("pos_tagging", "posattn_tagger_conv2d"),
    ("relation_classification", "relation_classifier"),
])
def test_encoder_only_models_have_no_decoder_flags(task, arch):
    flags = option_strings(task, arch)
    assert {"--encoder-layers", "--encoder-attention-heads", "--dropout"} <= flags
    assert not {f for f in flags if f.startswith("--decoder-")}
    assert not flags & {"--share-all-embeddings", "--share-decoder-input-output-embed",
                        "--max-target-positions", "--adaptive-softmax-cutoff"}


@pytest.mark.parametrize("task, arch", [
    ("logic_inference", "logic_san"),
    ("relation_classification", "relation_classifier"),
])
def test_a_decoder_flag_is_refused(task, arch):
    parser = options.get_training_parser()
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(parser, ["<data>", "--task", task, "--arch", arch,
                                             "--decoder-layers", "2"])


def test_translation_models_keep_the_decoder_flags():
    flags = option_strings("translation", "transformer_struct")
    assert {"--decoder-layers", "--share-all-embeddings", "--relative-positions"} <= flags
