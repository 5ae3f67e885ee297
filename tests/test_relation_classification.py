"""Relation classification (Bilan & Roth 2018): the TACRED-style scorer, the
entity distances and their bins, the position-aware attention, the encoder
layer options, the ``relation_classification`` task and the
``relation_classifier`` model, and the fairseq CLIs end to end on a toy
TACRED-format corpus written here (TACRED itself is licensed)."""

import json
import math
import random
import re
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import COMMON_ARGS, USER_DIR, run_cli
from fairseq import options, tasks
from fairseq.models.transformer import TransformerConfig

from fairseq_posattn.metrics import micro_scores, relation_counts
from fairseq_posattn.evaluation.relation_scores import cli_main as score_command
from fairseq_posattn.modules.options import PositionAttentionConfig
from fairseq_posattn.modules.attention_context import AttentionContext
from fairseq_posattn.modules.encoder_layer import PositionAwareEncoderLayer
from fairseq_posattn.models.relation.entity_positions import (
    PositionAwareAttention,
    bin_distances,
    entity_distances,
)
from fairseq_posattn.models.relation.encoder_layer import (
    MaskedBatchNorm,
    RelationEncoderLayer,
    RelationLayerOptions,
)
from fairseq_posattn.tasks.relation_classification import read_tacred

# --- a toy corpus in TACRED's format with a learnable signal ---------------

NAMES = {"PERSON": ["Anna Berg", "Ivo", "Mara Lind", "Tom"],
         "ORGANIZATION": ["Acme Corp", "Globex", "Initech Ltd"],
         "CITY": ["Oslo", "New York", "Turin"]}
TRIGGERS = {("PERSON", "CITY"): ("per:city_of_birth", ["was", "born", "in"]),
            ("PERSON", "ORGANIZATION"): ("per:employee_of", ["works", "for"]),
            ("ORGANIZATION", "CITY"): ("org:city_of_headquarters", ["is", "based", "in"])}
FILLER = ["the", "report", "said", "on", "monday", "that", "a", "new", "study", "shows", "and"]


def toy_example(rng, number):
    """Subject, words, object; the words between them decide the relation
    (half the examples get filler instead: no_relation)."""
    (subj_type, obj_type), (relation, between) = rng.choice(list(TRIGGERS.items()))
    if rng.random() < 0.5:
        relation, between = "no_relation", rng.sample(FILLER, 2)
    subj, obj = rng.choice(NAMES[subj_type]).split(), rng.choice(NAMES[obj_type]).split()
    left, right = rng.sample(FILLER, rng.randint(0, 3)), rng.sample(FILLER, rng.randint(0, 3))
    tokens = left + subj + between + obj + right
    subj_start, obj_start = len(left), len(left) + len(subj) + len(between)
    ner, pos = ["O"] * len(tokens), ["NN"] * len(tokens)
    for start, size, kind in ((subj_start, len(subj), subj_type), (obj_start, len(obj), obj_type)):
        ner[start:start + size], pos[start:start + size] = [kind] * size, ["NNP"] * size
    return {"id": f"toy{number}", "relation": relation, "token": tokens,
            "subj_start": subj_start, "subj_end": subj_start + len(subj) - 1,
            "obj_start": obj_start, "obj_end": obj_start + len(obj) - 1,
            "subj_type": subj_type, "obj_type": obj_type, "stanford_pos": pos, "stanford_ner": ner}


@pytest.fixture(scope="module")
def toy_tacred(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tacred")
    rng = random.Random(1)
    for split, size in (("train", 300), ("dev", 40), ("test", 50)):
        examples = [toy_example(rng, i) for i in range(size)]
        (directory / f"{split}.json").write_text(json.dumps(examples))
    return directory


# --- the scorer -------------------------------------------------------------

def tacred_reference(gold, predicted, negative="no_relation"):
    """The official scorer's loop (TACRED score.py), transcribed."""
    correct, guessed, gold_count = Counter(), Counter(), Counter()
    for g, p in zip(gold, predicted):
        if g == negative and p != negative:
            guessed[p] += 1
        elif g != negative and p == negative:
            gold_count[g] += 1
        elif g != negative and p != negative:
            guessed[p] += 1
            gold_count[g] += 1
            if g == p:
                correct[p] += 1
    precision = 1.0
    if sum(guessed.values()) > 0:
        precision = sum(correct.values()) / sum(guessed.values())
    recall = 0.0
    if sum(gold_count.values()) > 0:
        recall = sum(correct.values()) / sum(gold_count.values())
    f1 = 0.0
    if precision + recall > 0:
        f1 = 2 * precision * recall / (precision + recall)
    return precision, recall, f1


def scores(gold, predicted, negative="no_relation"):
    return micro_scores(*relation_counts(predicted, gold, negative))


def test_scorer_matches_reference_on_random_labels():
    rng = random.Random(0)
    labels = ["no_relation", "per:title", "org:founded", "per:age"]
    for _ in range(300):
        n = rng.randint(0, 30)
        gold = [rng.choice(labels) for _ in range(n)]
        predicted = [rng.choice(labels) for _ in range(n)]
        assert scores(gold, predicted) == pytest.approx(tacred_reference(gold, predicted))


@pytest.mark.parametrize("gold, predicted, expected", [
    # no positive prediction: precision 1 by the official convention, F1 0
    (["per:title", "no_relation"], ["no_relation", "no_relation"], (1.0, 0.0, 0.0)),
    # no positive gold label: recall 0
    (["no_relation", "no_relation"], ["per:title", "no_relation"], (0.0, 0.0, 0.0)),
    # nothing positive anywhere, and nothing at all
    (["no_relation"], ["no_relation"], (1.0, 0.0, 0.0)),
    ([], [], (1.0, 0.0, 0.0)),
    # a wrong positive label counts against precision and recall
    (["per:title", "per:age"], ["per:age", "per:age"], (0.5, 0.5, 0.5)),
    # correct negatives do not count at all
    (["per:title"] + ["no_relation"] * 5, ["per:title"] + ["no_relation"] * 5, (1.0, 1.0, 1.0)),
])
def test_scorer_edge_cases(gold, predicted, expected):
    assert scores(gold, predicted) == pytest.approx(expected)
    assert tacred_reference(gold, predicted) == pytest.approx(expected)


def test_scorer_on_class_indices_and_other_negative():
    gold = torch.tensor([0, 2, 2, 1])
    predicted = torch.tensor([2, 2, 0, 0])
    # negative class 0: correct 1 (index 1), guessed 2, gold 3
    assert relation_counts(predicted, gold, 0) == (1, 2, 3)
    assert scores(["x", "y"], ["y", "y"], negative="x") == pytest.approx((0.5, 1.0, 2 / 3))


# --- entity distances and bins ---------------------------------------------

def test_entity_distances_match_loop():
    for length in range(1, 9):
        for start in range(length):
            for end in range(start, length):
                expected = []
                for i in range(length):
                    if i < start:
                        expected.append(i - start)
                    elif i > end:
                        expected.append(i - end)
                    else:
                        expected.append(0)
                assert entity_distances(start, end, length).tolist() == expected


def test_bins_match_loop():
    """sign(d) * ceil(log2(|d| + 1)): the smallest k with 2**k > |d|."""
    distances = torch.arange(-3000, 3001)
    expected = []
    for d in distances.tolist():
        k = 0
        while 2**k <= abs(d):
            k += 1
        expected.append(k if d >= 0 else -k)
    assert bin_distances(distances).tolist() == expected
    assert bin_distances(distances).dtype == distances.dtype


def test_bins_of_the_authors_test_vector():
    """The published code's own test case (positions around a subject)."""
    distances = torch.tensor([-10, -9, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert bin_distances(distances).tolist() == [
        -4, -4, -4, -3, -3, -3, -3, -2, -2, -1, 0, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4]


# --- the position-aware attention (Eq. 3-5) -------------------------------

@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_position_aware_attention_matches_loop(dtype, tolerance):
    """float32 scores and softmax for float32 inputs (and half ones); float64
    inputs keep float64 throughout."""
    torch.manual_seed(0)
    layer = PositionAwareAttention(state_dim=6, query_dim=6, position_dim=3,
                                   attention_dim=5).to(dtype)
    torch.nn.init.normal_(layer.score.weight)  # zero at start: uniform attention
    states, query = torch.randn(2, 4, 6, dtype=dtype), torch.randn(2, 6, dtype=dtype)
    ps, po = torch.randn(2, 4, 3, dtype=dtype), torch.randn(2, 4, 3, dtype=dtype)
    mask = torch.tensor([[False] * 4, [True, False, False, True]])
    with torch.no_grad():
        z, weights = layer(states, mask, query, ps, po)
        assert (z.dtype, weights.dtype) == (dtype, dtype)
        w_h, b_h = layer.state_proj.weight, layer.state_proj.bias
        w_q, w_p, v = layer.query_proj.weight, layer.position_proj.weight, layer.score.weight[0]
        for b in range(2):
            real = [i for i in range(4) if not mask[b, i]]
            u = {i: float(v @ torch.tanh(w_h @ states[b, i] + b_h + w_q @ query[b]
                                          + w_p[:, :3] @ ps[b, i] + w_p[:, 3:] @ po[b, i]))
                 for i in real}
            total = sum(math.exp(x) for x in u.values())
            a = {i: math.exp(u[i]) / total for i in real}
            for i in range(4):
                assert float(weights[b, i]) == pytest.approx(a.get(i, 0.0), abs=tolerance)
            expected = sum(a[i] * states[b, i] for i in real)
            torch.testing.assert_close(z[b], expected, rtol=10 * tolerance, atol=tolerance)


# --- the encoder layer options ---------------------------------------------

def layer_config(**overrides):
    args = dict(encoder_embed_dim=8, encoder_ffn_embed_dim=12, encoder_attention_heads=2,
                dropout=0.0, attention_dropout=0.0)
    args.update(overrides)
    return TransformerConfig.from_namespace(SimpleNamespace(**args))


def test_masked_batch_norm_uses_real_tokens_only():
    torch.manual_seed(0)
    norm = MaskedBatchNorm(3)
    x = torch.randn(4, 2, 3)  # T, B, C
    mask = torch.tensor([[False, False, True, True], [False, False, False, False]])
    out = norm.train()(x, mask)
    real = x.transpose(0, 1)[~mask]  # the 6 real tokens
    expected = (real - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + norm.eps)
    torch.testing.assert_close(out.transpose(0, 1)[~mask], expected, rtol=1e-5, atol=1e-5)
    assert out.transpose(0, 1)[mask].abs().sum() == 0
    # the running statistics saw the real tokens only
    torch.testing.assert_close(norm.running_mean, 0.1 * real.mean(0))


def test_relation_layer_with_options_off_is_fairseq_layer():
    torch.manual_seed(0)
    cfg, attention_cfg = layer_config(), PositionAttentionConfig()
    reference = PositionAwareEncoderLayer(cfg, attention_cfg, 0).eval()
    layer = RelationEncoderLayer(cfg, attention_cfg, 0, RelationLayerOptions()).eval()
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(5, 3, 8)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[1, 3:] = True
    context = AttentionContext(5, x.device)
    torch.testing.assert_close(layer(x, mask, context), reference(x, mask, context))


def test_single_residual_batch_norm_rrelu_layer():
    """Eval mode: y = BN1(att(x)); out = BN2(x + fc2(leaky_relu(fc1(y))))
    with RReLU's evaluation slope (lower + upper) / 2."""
    torch.manual_seed(0)
    options = RelationLayerOptions(norm="batch", residual="single", activation="rrelu", init="kaiming")
    layer = RelationEncoderLayer(layer_config(), PositionAttentionConfig(), 0, options)
    for norm in (layer.self_attn_layer_norm, layer.final_layer_norm):
        norm.running_mean.normal_()
        norm.running_var.uniform_(0.5, 2.0)
    layer.eval()
    x = torch.randn(4, 2, 8)
    context = AttentionContext(4, x.device)
    attended, _ = layer.self_attn(x, context=context)

    def batch_norm(norm, h):
        return (h - norm.running_mean) / torch.sqrt(norm.running_var + norm.eps) * norm.weight + norm.bias

    y = batch_norm(layer.self_attn_layer_norm, attended)
    slope = (layer.activation_fn.lower + layer.activation_fn.upper) / 2
    ffn = layer.fc2(F.leaky_relu(layer.fc1(y), slope))
    expected = batch_norm(layer.final_layer_norm, x + ffn)
    torch.testing.assert_close(layer(x, None, context), expected, rtol=1e-5, atol=1e-5)


def test_kaiming_init_scale():
    torch.manual_seed(0)
    options = RelationLayerOptions(init="kaiming")
    layer = RelationEncoderLayer(layer_config(encoder_embed_dim=64, encoder_ffn_embed_dim=8,
                                              encoder_attention_heads=4),
                                 PositionAttentionConfig(), 0, options)
    # kaiming_normal_ (fan_in, gain sqrt 2): std sqrt(2 / 64); fairseq's Xavier gives 0.088
    for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
        assert float(projection.weight.detach().std()) == pytest.approx((2 / 64) ** 0.5, rel=0.1)


# --- task and model ---------------------------------------------------------

def test_reader_names_file_and_example(tmp_path):
    good = toy_example(random.Random(0), 0)
    path = tmp_path / "train.json"
    for broken, message in (
        ({k: v for k, v in good.items() if k != "obj_type"}, r"example 2 \(id toy0\): missing field\(s\) obj_type"),
        (dict(good, subj_end=len(good["token"])), r"example 2 \(id toy0\): subj_start .* is not a span"),
        (dict(good, stanford_ner=["O"]), r"example 2 \(id toy0\): 1 'stanford_ner' tags for"),
    ):
        path.write_text(json.dumps([good, broken]))
        with pytest.raises(ValueError, match=message):
            read_tacred(str(path))
    path.write_text('[{"token": ')
    with pytest.raises(ValueError, match=r"train.json, line 1: not valid JSON"):
        read_tacred(str(path))


def build(data, arch="bilan_roth_relation", *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--user-dir", str(USER_DIR), "--task", "relation_classification",
        "--criterion", "relation_classification", "--arch", arch, "--encoder-embed-dim", "24",
        "--pos-tag-embed-dim", "4", "--ner-tag-embed-dim", "4", "--encoder-ffn-embed-dim", "16",
        *extra,
    ])
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def test_task_masks_entities_and_builds_dictionaries(toy_tacred):
    task, _ = build(toy_tacred)
    train = read_tacred(str(toy_tacred / "train.json"))
    example = train[0]
    words = task.words(task.cfg, example)
    for entity, mark in (("subj", "SUBJ"), ("obj", "OBJ")):
        span = range(example[f"{entity}_start"], example[f"{entity}_end"] + 1)
        assert all(words[i] == f"{mark}-{example[f'{entity}_type']}" for i in span)
    outside = set(range(len(words))) - set(range(example["subj_start"], example["subj_end"] + 1)) \
        - set(range(example["obj_start"], example["obj_end"] + 1))
    assert all(words[i] == example["token"][i] for i in outside)
    plain = SimpleNamespace(lowercase=True, no_entity_masking=True)
    assert task.words(plain, example) == [t.lower() for t in example["token"]]
    assert task.label_name(task.negative_class()) == "no_relation"
    assert {task.label_name(c) for c in range(task.num_classes())} == \
        {e["relation"] for e in train} | {"no_relation"}
    assert "Oslo" not in task.dictionary.indices and "SUBJ-PERSON" in task.dictionary.indices


def test_unseen_relation_is_an_error(toy_tacred, tmp_path):
    for split in ("train", "dev"):
        (tmp_path / f"{split}.json").write_text((toy_tacred / f"{split}.json").read_text())
    test = [dict(toy_example(random.Random(2), 0), relation="per:unseen")]
    (tmp_path / "test.json").write_text(json.dumps(test))
    task, _ = build(tmp_path)
    task.load_dataset("valid")  # dev.json serves as the valid split
    with pytest.raises(ValueError, match=r"test.json, example 1: relation 'per:unseen' does not occur"):
        task.load_dataset("test")


@pytest.mark.parametrize("arch, extra", [
    ("bilan_roth_relation", ()),
    ("relation_classifier", ("--raw-entity-positions", "--relation-pooling", "max")),
])
def test_outputs_do_not_depend_on_padding_or_batch(toy_tacred, arch, extra):
    torch.manual_seed(0)
    task, model = build(toy_tacred, arch, *extra)
    task.load_dataset("test")
    dataset = task.dataset("test")
    model.train()
    for _ in range(3):  # move the batch-norm running statistics away from their start
        model(**dataset.collater([dataset[i] for i in range(16)])["net_input"])
    model.eval()
    indices = [0, 5, 9, 17, 23]
    with torch.no_grad():
        batch = dataset.collater([dataset[i] for i in indices])
        assert batch["net_input"]["src_tokens"].eq(task.dictionary.pad()).any()
        logits, extra_out = model(**batch["net_input"])
        for row, i in enumerate(indices):
            alone, _ = model(**dataset.collater([dataset[i]])["net_input"])
            torch.testing.assert_close(logits[row], alone[0], rtol=1e-5, atol=1e-5)
    if arch == "bilan_roth_relation":
        weights = extra_out["attention"]
        pads = batch["net_input"]["src_tokens"].eq(task.dictionary.pad())
        assert weights[pads].abs().max() == 0
        torch.testing.assert_close(weights.sum(-1), torch.ones(len(indices)))


def scores_in(text, prefix):
    found = re.search(prefix + r".*?precision ([0-9.]+) \| recall ([0-9.]+) \| f1 ([0-9.]+)", text)
    return tuple(float(x) for x in found.groups())


@pytest.mark.slow
def test_train_validate_and_score(toy_tacred, tmp_path, capsys):
    """fairseq-train the paper's model on the toy corpus, then fairseq-validate
    and both modes of the scoring command agree, and the signal was learned."""
    save_dir = tmp_path / "ckpt"
    run_cli(
        "fairseq-train", toy_tacred, "--user-dir", USER_DIR, "--task", "relation_classification",
        "--arch", "bilan_roth_relation", "--criterion", "relation_classification",
        "--encoder-embed-dim", "24", "--pos-tag-embed-dim", "4", "--ner-tag-embed-dim", "4",
        "--encoder-ffn-embed-dim", "16", "--optimizer", "adam", "--lr", "3e-3",
        "--batch-size", "16", "--max-epoch", "4", "--best-checkpoint-metric", "f1",
        "--maximize-best-checkpoint-metric", "--no-epoch-checkpoints",
        "--save-dir", save_dir, "--no-progress-bar", *COMMON_ARGS,
    )
    checkpoint = save_dir / "checkpoint_best.pt"
    validate = run_cli(
        "fairseq-validate", toy_tacred, "--user-dir", USER_DIR, "--task", "relation_classification",
        "--criterion", "relation_classification", "--path", checkpoint, "--valid-subset", "test",
        "--batch-size", "7", *COMMON_ARGS,
    )
    from_validate = scores_in(validate.stdout + validate.stderr, "valid on 'test' subset")
    predictions = tmp_path / "predictions.txt"
    score_command(["--checkpoint", str(checkpoint), "--split", "test",
                   "--write-predictions", str(predictions)])
    scored = capsys.readouterr().out
    score_command(["--gold", str(toy_tacred / "test.json"), "--predictions", str(predictions)])
    from_files = capsys.readouterr().out
    assert scores_in(scored, "") == scores_in(from_files, "")
    assert scores_in(scored, "") == pytest.approx(from_validate, abs=0.006)
    gold = [e["relation"] for e in read_tacred(str(toy_tacred / "test.json"))]
    predicted = predictions.read_text().splitlines()
    assert scores_in(scored, "") == pytest.approx(
        tuple(100 * s for s in tacred_reference(gold, predicted)), abs=0.006)
    assert from_validate[2] > 80  # the toy signal (the words between the entities) is learned
