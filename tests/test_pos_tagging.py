"""PoS tagging (Dufter et al. 2020): tags from CoNLL-U, the training
vocabulary and lexicon, all/OOV/ambiguous accuracy against a naive count,
the character CNN against a naive loop, padding-independence of the tagger,
RMSprop, pretrained vectors, and fairseq-train -> fairseq-validate -> the
scoring command on a tiny self-written treebank."""

import io
import json
import random
import re
from argparse import Namespace
from unittest import mock

import numpy as np
import pytest
import torch
from fairseq import options, tasks

from conftest import COMMON_ARGS, USER_DIR, run_cli, run_python

import fairseq_posattn  # noqa: F401  (registration)
from fairseq_posattn.metrics import tagging_accuracies, tagging_counts
from fairseq_posattn.data.tagging import (
    PAD_TAG, UNSEEN_TAG, TaggedPieceDataset, TaggedSentence, TaggingVocabulary,
    read_tagged_sentences, treebank_file,
)
from fairseq_posattn.models.tagger.model import TAGGER_ROWS
from fairseq_posattn.models.tagger.word_features import CharacterCNN, load_word_vectors
from fairseq_posattn.structure import DependencyTree, StructureError, read_conllu, write_conllu

# ---------------------------------------------------------------- a tiny treebank

DET, ADJ, PRON, ADP = ["the", "a", "this"], ["big", "small", "red"], ["he", "she"], ["with", "in"]
NOUNS = ["dog", "cat", "man", "book", "house", "saw", "walks"]
VERBS = ["sees", "likes", "reads", "saw", "walks", "books"]  # saw, walks, book(s): both
NEW_NOUNS, NEW_ADJ = ["zebra", "lamp"], ["tiny"]  # dev/test only: OOV


def noun_phrase(rng, new):
    nouns, adjs = NOUNS + (NEW_NOUNS if new else []), ADJ + (NEW_ADJ if new else [])
    words = [(rng.choice(DET), "DET")]
    if rng.random() < 0.5:
        words.append((rng.choice(adjs), "ADJ"))
    return words + [(rng.choice(nouns), "NOUN")]


def toy_sentence(rng, new=False):
    """(NP | PRON) VERB NP [ADP NP] . -- ambiguous words get their tag from context."""
    subject = noun_phrase(rng, new) if rng.random() < 0.6 else [(rng.choice(PRON), "PRON")]
    words = subject + [(rng.choice(VERBS), "VERB")] + noun_phrase(rng, new)
    if rng.random() < 0.4:
        words += [(rng.choice(ADP), "ADP")] + noun_phrase(rng, new)
    return words + [(".", "PUNCT")]


def toy_treebank(directory, sizes=(("train", 60), ("dev", 15), ("test", 15)), seed=1):
    """``xx_toy-ud-{train,dev,test}.conllu``: UPOS, XPOS = UPOS lower-cased, the verb heads all."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        trees = []
        for _ in range(n):
            words, tags = zip(*toy_sentence(rng, new=split != "train"))
            verb = tags.index("VERB") + 1
            trees.append(DependencyTree(list(words), [0 if i + 1 == verb else verb
                                                      for i in range(len(words))],
                                        upos=list(tags), xpos=[t.lower() for t in tags]))
        write_conllu(trees, str(directory / f"xx_toy-ud-{split}.conllu"))
    return directory


# ---------------------------------------------------------------- reading tags

def conllu_line(tid, form, upos, xpos, head):
    return "\t".join([str(tid), form, "_", upos, xpos, "_", str(head), "dep", "_", "_"])


def test_reader_keeps_upos_xpos_and_multiword_tokens_take_their_head_member(tmp_path):
    # "can't" = ca (AUX) + n't (PART), both attached to "go": the first member, AUX, stands
    # for the token; "zum" = zu (ADP, head of) + dem (DET): ADP
    text = "\n".join([
        conllu_line(1, "I", "PRON", "PRP", 4),
        "2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_",
        conllu_line(2, "ca", "AUX", "MD", 4),
        conllu_line(3, "n't", "PART", "RB", 4),
        conllu_line(4, "go", "VERB", "VB", 0),
        "5-6\tzum\t_\t_\t_\t_\t_\t_\t_\t_",
        conllu_line(5, "zu", "ADP", "APPR", 4),
        conllu_line(6, "dem", "DET", "ART", 5),
    ]) + "\n\n"
    (tree,) = read_conllu(io.StringIO(text))
    assert tree.words == ["I", "can't", "go", "zum"]
    assert tree.upos == ["PRON", "AUX", "VERB", "ADP"]
    assert tree.xpos == ["PRP", "MD", "VB", "APPR"]
    out = io.StringIO()
    write_conllu([tree], out)
    (again,) = read_conllu(io.StringIO(out.getvalue()))
    assert again == tree


def test_missing_tags_and_splits_are_clear_errors(tmp_path):
    bad = tmp_path / "xx-ud-train.conllu"
    bad.write_text(conllu_line(1, "a", "DET", "_", 2) + "\n" + conllu_line(2, "b", "_", "_", 0)
                   + "\n\n", encoding="utf-8")
    with pytest.raises(StructureError, match=r"xx-ud-train.conllu, sentence 1, line 1: "
                                             r"word 2 'b' has no UPOS tag"):
        read_tagged_sentences(str(bad), "upos")
    with pytest.raises(StructureError, match="the sentence has no XPOS tags"):
        read_tagged_sentences(str(bad), "xpos")
    with pytest.raises(FileNotFoundError, match=r"split 'valid': no file matching \*dev.conllu"):
        treebank_file(str(tmp_path), "valid")
    assert treebank_file(str(tmp_path), "train") == str(bad)


# ---------------------------------------------------------------- accuracies

def naive_accuracies(train, test, predictions):
    """Accuracy on all, OOV and ambiguous words by direct counting."""
    seen = {}
    for sentence in train:
        for word, tag in zip(sentence.words, sentence.tags):
            seen.setdefault(word, set()).add(tag)
    hits = {"all": [], "oov": [], "ambiguous": []}
    for sentence, predicted in zip(test, predictions):
        for word, gold, guess in zip(sentence.words, sentence.tags, predicted):
            hits["all"].append(gold == guess)
            if word not in seen:
                hits["oov"].append(gold == guess)
            elif len(seen[word]) > 1:
                hits["ambiguous"].append(gold == guess)
    return {k: 100.0 * sum(v) / len(v) for k, v in hits.items()}


def sentence(pairs):
    """``"the/D saw/N"`` -> a tagged sentence."""
    words, tags = zip(*(pair.split("/") for pair in pairs.split()))
    return TaggedSentence(list(words), list(tags))


def test_accuracies_match_a_naive_count_over_pieces_and_batches():
    train = [sentence("the/D saw/N cuts/V wood/N"), sentence("he/P saw/V the/D saw/N"),
             sentence("wood/N burns/V"), sentence("he/P cuts/V wood/N")]
    test = [sentence("the/D saw/N saw/V the/D zebra/N ./X"),  # "." tag X: unseen in training
            sentence("he/P burns/V the/D lamp/N"), sentence("wood/N saw/V he/P")]
    vocabulary = TaggingVocabulary.build(train, min_word_count=2)
    rng = random.Random(0)
    tags = vocabulary.tags
    predictions = [[gold if gold in tags and rng.random() < 0.5 else rng.choice(tags)
                    for gold in s.tags] for s in test]
    dataset = TaggedPieceDataset(test, vocabulary, max_piece_length=4, max_word_chars=3,
                                 shuffle=False)
    assert dataset.pieces == [(0, 0), (0, 4), (1, 0), (2, 0)]
    assert dataset.unseen_tags == 1
    # predictions laid out like a batch of pieces, in a shuffled order
    order = [3, 0, 2, 1]
    batch = dataset.collater([dataset[i] for i in order])
    predicted = torch.full_like(batch["target"], PAD_TAG)
    for row, item in enumerate(order):
        s, start = dataset.pieces[item]
        piece = predictions[s][start:start + dataset.sizes[item]]
        predicted[row, :len(piece)] = torch.tensor([tags.index(t) for t in piece])
    assert int(batch["target"].eq(UNSEEN_TAG).sum()) == 1
    accuracies = tagging_accuracies(tagging_counts(predicted, batch["target"], batch["word_class"]))
    expected = naive_accuracies(train, test, predictions)
    assert accuracies["accuracy"] == pytest.approx(expected["all"])
    assert accuracies["oov_accuracy"] == pytest.approx(expected["oov"])
    assert accuracies["ambiguous_accuracy"] == pytest.approx(expected["ambiguous"])


def test_vocabulary_round_trips_through_plain_state():
    train = [sentence("the/D saw/N saw/V the/D saw/N"), sentence("a/D cat/N")]
    vocabulary = TaggingVocabulary.build(train, min_word_count=2)
    # words seen once share <unk>; their characters and lexicon entries remain
    assert vocabulary.encode_words(["saw", "cat", "<pad>"]).tolist() == [
        vocabulary.words.index("saw"), vocabulary.words.unk(), vocabulary.words.unk()]
    assert vocabulary.lexicon["cat"] == ["N"] and vocabulary.lexicon["saw"] == ["N", "V"]
    state = vocabulary.state_dict()
    assert json.loads(json.dumps(state)) == state  # plain data only
    again = TaggingVocabulary.from_state_dict(state)
    assert again.words.symbols == vocabulary.words.symbols
    assert again.chars.symbols == vocabulary.chars.symbols
    assert again.tags == vocabulary.tags and again.lexicon == vocabulary.lexicon


# ---------------------------------------------------------------- character CNN

def naive_char_cnn(cnn, ids):
    """One word (list of char ids): embeddings, convolutions as explicit sums
    over the filter (zero beyond the word), ReLU, maximum over positions."""
    x = [cnn.embed.weight[c] for c in ids]
    for conv in cnn.convs:
        half = conv.kernel_size[0] // 2
        out = []
        for i in range(len(x)):
            total = conv.bias.clone()
            for k in range(conv.kernel_size[0]):
                j = i + k - half
                if 0 <= j < len(x):
                    total = total + conv.weight[:, :, k] @ x[j]
            out.append(torch.relu(total))
        x = out
    return torch.stack(x).max(dim=0).values


def test_char_cnn_matches_a_naive_loop_and_ignores_padding():
    torch.manual_seed(0)
    cnn = CharacterCNN(num_chars=12, embed_dim=6, padding_idx=1, num_layers=2, kernel_size=3)
    # several lengths (the CNN groups words by length) and a repeated word
    words = [[4, 5], [6, 7, 8, 9, 10, 11, 4], [9], [4, 5, 6], [2, 3, 4, 5, 6], [4, 5]]
    padded = torch.full((1, len(words) + 1, 9), 1, dtype=torch.long)  # a padding word too
    for i, w in enumerate(words):
        padded[0, i, :len(w)] = torch.tensor(w)
    with torch.no_grad():
        together = cnn(padded)[0]
        for i, w in enumerate(words):
            alone = cnn(torch.tensor([w]))[0]
            assert torch.allclose(together[i], alone, atol=1e-6)
            assert torch.allclose(alone, naive_char_cnn(cnn, w), atol=1e-5)
    assert together[len(words)].abs().sum() == 0  # the padding word


# ---------------------------------------------------------------- the tagger

def build_tagger(data_dir, arch, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data_dir), "--task", "pos_tagging", "--arch", arch, "--max-piece-length", "12",
        "--word-embed-dim", "8", "--char-embed-dim", "8", "--encoder-layers", "2", *extra])
    task = tasks.setup_task(args)
    return task, task.build_model(args).eval()


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    return toy_treebank(tmp_path_factory.mktemp("toy-ud"))


@pytest.mark.parametrize("arch", ["posattn_tagger", "posattn_tagger_pe_con",
                                  "posattn_tagger_pr", "posattn_tagger_conv1d",
                                  "posattn_tagger_conv2d"])
def test_tagger_output_does_not_depend_on_padding_or_batch(treebank, arch):
    torch.manual_seed(0)
    task, model = build_tagger(treebank, arch, "--learnable-temperature")
    task.load_dataset("test")
    dataset = task.dataset("test")
    short, long = int(np.argmin(dataset.sizes)), int(np.argmax(dataset.sizes))
    assert dataset.sizes[short] < dataset.sizes[long]
    alone = dataset.collater([dataset[short]])
    batch = dataset.collater([dataset[long], dataset[short]])
    n = int(dataset.sizes[short])
    with torch.no_grad():
        expected = model(**alone["net_input"])[0]
        assert torch.allclose(model(**batch["net_input"])[1, :n], expected, atol=1e-5)
        # left padding (the encoder reorders it to true positions)
        net = batch["net_input"]
        pads = net["src_tokens"].size(1) - n
        left = {"src_tokens": net["src_tokens"][1].roll(pads).unsqueeze(0),
                "src_chars": net["src_chars"][1].roll(pads, dims=0).unsqueeze(0),
                "src_lengths": net["src_lengths"][1:]}
        assert torch.allclose(model(**left)[0, pads:], expected, atol=1e-5)


@pytest.mark.parametrize("arch, sees_order", [("posattn_tagger_san", False),
                                               ("posattn_tagger", True),
                                               ("posattn_tagger_pe_con", True),
                                               ("posattn_tagger_pr", True)])
def test_only_the_san_row_is_blind_to_word_order(treebank, arch, sees_order):
    """SAN (Dufter et al. 2020, Table 2b) has no position information at all:
    permuting a sentence's words permutes its tag scores and changes nothing
    else; every row with positions tells the orders apart."""
    torch.manual_seed(0)
    task, model = build_tagger(treebank, arch)
    task.load_dataset("test")
    dataset = task.dataset("test")
    net = dataset.collater([dataset[int(np.argmax(dataset.sizes))]])["net_input"]
    n = int(net["src_lengths"][0])
    order = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    permuted = {**net, "src_tokens": net["src_tokens"][:, order],
                "src_chars": net["src_chars"][:, order]}
    with torch.no_grad():
        expected = model(**net)[0][order]
        got = model(**permuted)[0]
    assert not torch.equal(order, torch.arange(n))
    assert torch.allclose(got, expected, atol=1e-5) != sees_order


def test_named_rows_select_their_options(treebank):
    assert set(TAGGER_ROWS) >= {f"posattn_tagger_{row}" for row in
                                ("san", "pe_con", "p", "r", "pr", "temp", "conv1d", "conv2d")}
    _, p = build_tagger(treebank, "posattn_tagger_p")
    first, second = p.encoder.layers[0].self_attn, p.encoder.layers[1].self_attn
    assert p.encoder.embed_positions is None
    assert [type(t).__name__ for t in first.score_terms] == ["AbsolutePositionInteraction"]
    assert first.score_terms[0].weight.shape == (4, 12, 12)  # t = --max-piece-length
    assert len(second.score_terms) == 0
    _, given = build_tagger(treebank, "posattn_tagger_p", "--interaction-max-len", "16")
    assert given.encoder.layers[0].self_attn.score_terms[0].weight.shape == (4, 16, 16)
    _, con = build_tagger(treebank, "posattn_tagger_pe_con")
    # word 8 + characters 8 + positions 64 (the authors' PE[con] width)
    assert con.encoder.embed_positions.embedding_dim == 64
    assert con.classifier.in_features == 16 + 80
    _, conv = build_tagger(treebank, "posattn_tagger_conv2d")
    assert all(type(layer.self_attn.probability_terms[0]).__name__ == "ConvolvedAttention2d"
               for layer in conv.encoder.layers)
    assert not any(hasattr(layer, "fc1") or hasattr(layer, "self_attn_layer_norm")
                   for layer in conv.encoder.layers)  # no feed-forward, no layer norm


def test_tag_column_xpos_predicts_the_xpos_tags(treebank):
    task, model = build_tagger(treebank, "posattn_tagger", "--tag-column", "xpos")
    assert sorted(task.vocabulary.tags) == ["adj", "adp", "det", "noun", "pron", "punct", "verb"]
    assert model.classifier.out_features == 7


def test_rmsprop_passes_its_settings_to_torch():
    from fairseq.optim import build_optimizer

    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = build_optimizer(Namespace(optimizer="rmsprop", lr=[0.01], rmsprop_alpha=0.8,
                                          rmsprop_eps=1e-5), params)
    assert isinstance(optimizer.optimizer, torch.optim.RMSprop)
    group = optimizer.optimizer.param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"]) == (0.01, 0.8, 1e-5)


def test_pretrained_vectors_fill_their_rows_and_bad_lines_are_named(tmp_path):
    vocabulary = TaggingVocabulary.build([sentence("the/D dog/N the/D dog/N cat/N")],
                                         min_word_count=2)
    embedding = torch.nn.Embedding(len(vocabulary.words), 3)
    before = embedding.weight.detach().clone()
    vec = tmp_path / "v.vec"
    vec.write_text("3 3\nthe 1 2 3\nzebra x y\ndog 4 5 6 \n", encoding="utf-8")
    assert load_word_vectors(str(vec), embedding, vocabulary.words) == 2
    words = vocabulary.words
    assert embedding.weight[words.index("the")].tolist() == [1, 2, 3]
    assert embedding.weight[words.index("dog")].tolist() == [4, 5, 6]
    assert torch.equal(embedding.weight[words.unk()], before[words.unk()])
    vec.write_text("the 1 2\n", encoding="utf-8")
    with pytest.raises(StructureError, match=r"v.vec, line 1: the vector of 'the' is not 3"):
        load_word_vectors(str(vec), embedding, vocabulary.words)


# ---------------------------------------------------------------- end to end

def validate_scores(stdout_and_err, subset):
    line = re.search(rf"valid on '{subset}' subset \|(.*)", stdout_and_err).group(1)
    return {k: float(v) for k, v in re.findall(r"(\w+) ([-\d.]+|nan)", line)}


@pytest.mark.slow
def test_train_validate_and_score_from_conllu(treebank, tmp_path):
    save = tmp_path / "ckpt"
    vec = tmp_path / "toy.vec"
    vec.write_text("2 8\n" + "".join(f"{w} " + " ".join(["0.1"] * 8) + "\n"
                                     for w in ("the", "dog")), encoding="utf-8")
    run_cli(
        "fairseq-train", treebank, "--user-dir", USER_DIR, "--task", "pos_tagging",
        "--arch", "posattn_tagger_conv2d", "--encoder-layers", "2", "--char-embed-dim", "16",
        "--pretrained-word-vectors", vec, "--max-piece-length", "12",
        "--criterion", "tagging_cross_entropy", "--optimizer", "rmsprop", "--lr", "3e-3",
        "--batch-size", "8", "--max-epoch", "12", "--seed", "1", "--save-dir", save,
        "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric",
        "--no-epoch-checkpoints", "--no-progress-bar", *COMMON_ARGS,
    )
    ckpt = save / "checkpoint_best.pt"
    # everything the checkpoint pickles (task state included) is on the plugin's allow-list
    if hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint"):
        from fairseq_posattn.compat.safe_loading import fairseq_checkpoint_globals

        allowed = {name for _, name in fairseq_checkpoint_globals()}
        assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt))) <= allowed

    validate = run_cli("fairseq-validate", treebank, "--user-dir", USER_DIR,
                       "--task", "pos_tagging", "--path", ckpt, "--valid-subset", "test",
                       "--batch-size", "4", *COMMON_ARGS)
    scores = validate_scores(validate.stdout + validate.stderr, "test")
    # the toy grammar decides every tag by context; chance is 1/7
    assert scores["accuracy"] > 80

    # the scoring command needs no training file: the vocabulary is in the checkpoint
    test_only = tmp_path / "test-only"
    test_only.mkdir()
    (test_only / "xx_toy-ud-test.conllu").write_bytes(
        (treebank / "xx_toy-ud-test.conllu").read_bytes())
    result, tags = tmp_path / "result.json", tmp_path / "tags.txt"
    run_python("from fairseq_posattn.evaluation.pos_tagging import cli_main; cli_main()",
               "--path", ckpt, "--data", test_only, "--split", "test",
               "--json", result, "--output", tags)
    counts = json.loads(result.read_text())
    for name in ("accuracy", "oov_accuracy", "ambiguous_accuracy"):
        assert counts[name] == pytest.approx(scores[name], abs=0.01)
    test = read_tagged_sentences(str(treebank / "xx_toy-ud-test.conllu"))
    train = read_tagged_sentences(str(treebank / "xx_toy-ud-train.conllu"))
    predictions = [line.split() for line in tags.read_text().splitlines()]
    assert [len(p) for p in predictions] == [len(s.words) for s in test]
    expected = naive_accuracies(train, test, predictions)
    assert counts["accuracy"] == pytest.approx(expected["all"])
    assert counts["oov_accuracy"] == pytest.approx(expected["oov"])
    assert counts["ambiguous_accuracy"] == pytest.approx(expected["ambiguous"])
    assert counts["oov"] > 0 and counts["ambiguous"] > 0


def test_pos_table_gives_mean_and_sample_std_in_the_papers_row_order(tmp_path, capsys):
    from fairseq_posattn.evaluation import pos_table

    runs = {"conv2d": [95.0, 96.0], "san": [80.0, 82.0, 84.0], "pe_add": [90.0]}
    for treebank in ("UD_X-Y", "UD_Afrikaans-AfriBooms"):
        for variant, accuracies in runs.items():
            for seed, accuracy in enumerate(accuracies, 1):
                path = tmp_path / treebank / variant / f"seed{seed}" / "test.json"
                path.parent.mkdir(parents=True)
                path.write_text(json.dumps({"accuracy": accuracy, "oov_accuracy": accuracy - 10,
                                            "ambiguous_accuracy": accuracy - 5, "words": 100,
                                            "oov": 10, "ambiguous": 20}))
                if treebank != "UD_X-Y":
                    path.with_name("train.json").write_text(json.dumps(
                        {"epochs": 10 + seed, "settings": {"commit": "abcdef0123", "seed": seed}}))
    pos_table.main([str(tmp_path)])
    out = capsys.readouterr().out
    overview, afrikaans, other = out.split("\n\n#### ")
    # the overview: our mean beside Dufter et al.'s Table 2d value where it has one
    assert overview.splitlines()[2:] == [
        "| Afrikaans-AfriBooms | 82.00 | 90.00 (92.11) | 95.50 (94.75) |",
        "| X-Y | 82.00 | 90.00 | 95.50 |",
    ]
    assert [l for l in afrikaans.splitlines() if l.startswith("| SAN")] == [
        "| SAN | 3 | 82.00 ± 2.00 |  | 72.00 ± 2.00 | 77.00 ± 2.00 | 11, 12, 13 |",
        "| SAN+PE[add] | 1 | 90.00 | 92.11 | 80.00 | 85.00 | 11 |",
        "| SAN+PE[add]+Conv2d | 2 | 95.50 ± 0.71 | 94.75 | 85.50 ± 0.71 | 90.50 ± 0.71 | 11, 12 |",
    ]
    assert afrikaans.rstrip().endswith("Trained at commit abcdef0 (train.json).")
    # without training summaries: no epochs, no commit line
    assert [l for l in other.splitlines() if l.startswith("| SAN+PE[add] ")] == [
        "| SAN+PE[add] | 1 | 90.00 |  | 80.00 | 85.00 |  |"]
    assert "commit" not in other


def test_pos_table_figure_draws_every_seed_from_the_training_summaries(tmp_path):
    import matplotlib.pyplot  # noqa: F401 (imported before Axes.plot is mocked)

    from fairseq_posattn.evaluation import pos_table

    for treebank in ("UD_A-B", "UD_C-D"):
        for variant in ("san", "conv2d"):
            for seed in (1, 2):
                run = tmp_path / treebank / variant / f"seed{seed}"
                run.mkdir(parents=True)
                run.joinpath("test.json").write_text(json.dumps(
                    {"accuracy": 90.0, "oov_accuracy": 80.0, "ambiguous_accuracy": 85.0,
                     "words": 100, "oov": 10, "ambiguous": 20}))
                run.joinpath("train.json").write_text(json.dumps({"epochs": 2, "settings": {}, "validations": [
                    {"epoch": 1, "updates": 10, "accuracy": 50.0 + seed},
                    {"epoch": 2, "updates": 20, "accuracy": 60.0 + seed}]}))
    figure = tmp_path / "curves.png"
    with mock.patch("matplotlib.axes.Axes.plot", return_value=[]) as plot:
        pos_table.main([str(tmp_path), "--figure", str(figure)])
    # a line per treebank, variant and seed, with the epochs' (updates, accuracy)
    assert plot.call_count == 8
    assert {(c.args, c.kwargs["label"]) for c in plot.call_args_list if c.kwargs["label"]} == {
        (((10, 20), (51.0, 61.0)), "SAN"), (((10, 20), (51.0, 61.0)), "SAN+PE[add]+Conv2d")}
    pos_table.main([str(tmp_path), "--figure", str(figure)])
    assert figure.read_bytes()[:4] == b"\x89PNG"
