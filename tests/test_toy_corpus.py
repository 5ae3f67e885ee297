"""Tests of the synthetic toy corpus (fairseq_posattn.toy_corpus)."""

import collections
import dataclasses

import conllu
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_posattn import toy_corpus as tc


def check_tree(heads):
    """Assert that 1-based ``heads`` form one tree rooted at a 0 head."""
    n = len(heads)
    assert all(0 <= h <= n for h in heads), heads
    assert all(h != i for i, h in enumerate(heads, start=1)), heads
    roots = [i for i, h in enumerate(heads, start=1) if h == 0]
    assert len(roots) == 1, heads
    for i in range(1, n + 1):  # every word reaches the root without a cycle
        seen = set()
        node = i
        while node != 0:
            assert node not in seen, "cycle through %d in %s" % (node, heads)
            seen.add(node)
            node = heads[node - 1]
    return roots[0]


def test_deterministic_for_a_seed():
    a = tc.generate_examples(80, seed=7)
    b = tc.generate_examples(80, seed=7)
    c = tc.generate_examples(80, seed=8)
    assert a == b
    assert a != c
    assert tc.generate_splits({"train": 20, "test": 5}, seed=3) == \
        tc.generate_splits({"train": 20, "test": 5}, seed=3)


def tree_key(ex):
    return ex.src, ex.heads, ex.deprels


def test_unique_examples_and_disjoint_splits():
    splits = tc.generate_splits({"train": 300, "valid": 40, "test": 40}, seed=2)
    assert {k: len(v) for k, v in splits.items()} == {"train": 300, "valid": 40, "test": 40}
    keys = [tree_key(ex) for exs in splits.values() for ex in exs]
    assert len(keys) == len(set(keys))  # no (source, tree) twice, so none across splits
    train = {tree_key(ex) for ex in splits["train"]}
    assert not train & {tree_key(ex) for ex in splits["test"] + splits["valid"]}


def is_projective(heads):
    arcs = [sorted((i, h)) for i, h in enumerate(heads, start=1) if h]
    return not any(a < c < b < d for a, b in arcs for c, d in arcs)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_trees_are_valid_and_ud_like(seed):
    for ex in tc.generate_examples(15, seed=seed):
        n = len(ex.src)
        assert n == len(ex.heads) == len(ex.deprels) == len(ex.upos) == len(ex.lemmas)
        root = check_tree(ex.heads)
        assert is_projective(ex.heads), ex.src
        assert ex.deprels[root - 1] == "root"
        assert ex.upos[root - 1] == "VERB"
        assert ex.src[-1] == "." and ex.heads[-1] == root
        for i in range(n):
            head_upos = ex.upos[ex.heads[i] - 1] if ex.heads[i] else None
            if ex.deprels[i] in ("det", "amod", "case"):
                assert head_upos == "NOUN", (ex.src, i)
            if ex.deprels[i] in ("nsubj", "obj", "obl"):
                assert head_upos == "VERB", (ex.src, i)
            if ex.deprels[i] in ("aux", "mark"):
                assert head_upos == "VERB" and ex.heads[i] > i + 1, (ex.src, i)
            if ex.deprels[i] == "case":  # prepositions precede their noun
                assert ex.heads[i] > i + 1


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_translation_is_word_for_word_up_to_order(seed):
    """Every source word has exactly one target word (commas are added)."""
    for ex in tc.generate_examples(15, seed=seed):
        src_words = [w for w in ex.src if w not in (",", ".")]
        tgt_words = [w for w in ex.tgt if w not in (",", ".")]
        assert len(src_words) == len(tgt_words), (ex.src, ex.tgt)
        assert ex.tgt[-1] == "."
        # nouns are translated by the lexicon, one for one
        src_nouns = collections.Counter(
            tc._NOUNS[w][0] for w, u in zip(ex.src, ex.upos) if u == "NOUN")
        tgt_nouns = collections.Counter(w for w in ex.tgt if w[0].isupper())
        assert src_nouns == tgt_nouns


def test_reordering_depends_on_the_tree():
    """Subordinate clauses are verb-final; a fronted one inverts the main clause."""
    finite = {v.de_3sg for v in tc._VERBS} | {"hat", "ist"}
    sconj = set(tc._SUBORDINATORS.values())
    checked = fronted = 0
    for ex in tc.generate_examples(400, seed=11):
        if "mark" not in ex.deprels:
            continue
        start = next(i for i, w in enumerate(ex.tgt) if w in sconj)
        end = next(i for i in range(start, len(ex.tgt)) if ex.tgt[i] in (",", "."))
        clause = ex.tgt[start:end]
        assert clause[-1] in finite, ex.tgt
        checked += 1
        if start == 0:  # fronted: "weil ... , <finite verb> <subject> ..."
            fronted += 1
            assert ex.tgt[end] == "," and ex.tgt[end + 1] in finite, ex.tgt
    assert checked > 50 and fronted > 10


def test_english_article_agrees_with_next_word():
    for ex in tc.generate_examples(300, seed=5):
        for i, w in enumerate(ex.src[:-1]):
            if w in ("a", "an"):
                assert (w == "an") == (ex.src[i + 1][0] in "aeiou"), ex.src


def test_same_source_string_with_two_trees_and_two_targets():
    """The generator itself makes some sentence with both attachments."""
    by_src = collections.defaultdict(dict)
    for ex in tc.generate_examples(20000, seed=1):
        by_src[ex.src][ex.heads] = ex
    pairs = [list(v.values())[:2] for v in by_src.values() if len(v) > 1]
    assert pairs
    for a, b in pairs:
        assert a.heads != b.heads and a.tgt != b.tgt
        assert b in tc.readings(a)


def example(src, heads, deprels, upos):
    """A ToyExample from a hand-written tree (lemmas: verbs by hand)."""
    lemmas = [{"sees": "see", "has": "have", "sleeps": "sleep", "sings": "sing",
               "comes": "come", "seen": "see"}.get(w, w) for w in src.split()]
    return tc.ToyExample(tuple(src.split()), tuple(heads), (), tuple(deprels.split()),
                         tuple(upos.split()), tuple(lemmas))


def test_pp_attachment_decides_the_german_order():
    src = "the child sees the man with the dog ."
    rels = "det nsubj root det obj case det {} punct"
    upos = "DET NOUN VERB DET NOUN ADP DET NOUN PUNCT"
    noun = example(src, [2, 3, 0, 5, 3, 8, 8, 5, 3], rels.format("nmod"), upos)
    verb = example(src, [2, 3, 0, 5, 3, 8, 8, 3, 3], rels.format("obl"), upos)
    assert " ".join(tc.target_from_tree(noun)) == "das Kind sieht den Mann mit dem Hund ."
    assert " ".join(tc.target_from_tree(verb)) == "das Kind sieht mit dem Hund den Mann ."
    # in a subordinate clause with a participle as well
    src = "the cat sleeps because the child has seen the man with the dog ."
    rels = "det nsubj root mark det nsubj aux advcl det obj case det {} punct"
    upos = "DET NOUN VERB SCONJ DET NOUN AUX VERB DET NOUN ADP DET NOUN PUNCT"
    noun = example(src, [2, 3, 0, 8, 6, 8, 8, 3, 10, 8, 13, 13, 10, 3],
                   rels.format("nmod"), upos)
    verb = example(src, [2, 3, 0, 8, 6, 8, 8, 3, 10, 8, 13, 13, 8, 3],
                   rels.format("obl"), upos)
    assert " ".join(tc.target_from_tree(noun)) == \
        "die Katze schlaeft , weil das Kind den Mann mit dem Hund gesehen hat ."
    assert " ".join(tc.target_from_tree(verb)) == \
        "die Katze schlaeft , weil das Kind mit dem Hund den Mann gesehen hat ."


def test_relative_pronoun_agrees_with_the_attachment():
    src = "the dog of the woman that sings sleeps ."
    rels = "det nsubj case det nmod nsubj acl:relcl root punct"
    upos = "DET NOUN ADP DET NOUN PRON VERB VERB PUNCT"
    to_woman = example(src, [2, 8, 5, 5, 2, 7, 5, 0, 8], rels, upos)
    to_dog = example(src, [2, 8, 5, 5, 2, 7, 2, 0, 8], rels, upos)
    assert " ".join(tc.target_from_tree(to_woman)) == \
        "der Hund von der Frau , die singt , schlaeft ."
    assert " ".join(tc.target_from_tree(to_dog)) == \
        "der Hund von der Frau , der singt , schlaeft ."


def test_final_adverb_goes_to_the_middle_field_of_its_clause():
    src = "the man comes when the cat sings again ."
    rels = "det nsubj root mark det nsubj advcl advmod punct"
    upos = "DET NOUN VERB SCONJ DET NOUN VERB ADV PUNCT"
    main = example(src, [2, 3, 0, 7, 6, 7, 3, 3, 3], rels, upos)
    sub = example(src, [2, 3, 0, 7, 6, 7, 3, 7, 3], rels, upos)
    assert " ".join(tc.target_from_tree(main)) == \
        "der Mann kommt wieder , wenn die Katze singt ."
    assert " ".join(tc.target_from_tree(sub)) == \
        "der Mann kommt , wenn die Katze wieder singt ."


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_target_is_a_function_of_the_tree(seed):
    """Rebuilt from heads, relations, tags and lemmas alone (the CoNLL-U
    columns), the tree gives back the generated target."""
    for ex in tc.generate_examples(20, seed=seed):
        blind = dataclasses.replace(ex, src=("x",) * len(ex.src), tgt=())
        assert tc.target_from_tree(blind) == ex.tgt
        sent = conllu.parse(tc.to_conllu(ex))[0]
        parsed = tc.ToyExample(
            src=(), tgt=(), heads=tuple(t["head"] for t in sent),
            deprels=tuple(t["deprel"] for t in sent),
            upos=tuple(t["upos"] for t in sent), lemmas=tuple(t["lemma"] for t in sent))
        assert tc.target_from_tree(parsed) == ex.tgt


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_readings_share_the_source_and_differ_in_tree_and_target(seed):
    for ex in tc.generate_examples(20, seed=seed):
        alts = tc.readings(ex)
        assert alts[0] == ex
        assert len(alts) == 2 ** len(tc.ambiguity_kinds(ex))
        assert len({a.heads for a in alts}) == len({a.tgt for a in alts}) == len(alts)
        keys = {tree_key(a) for a in alts}
        for alt in alts:
            assert alt.src == ex.src and alt.lemmas == ex.lemmas
            check_tree(alt.heads)
            assert is_projective(alt.heads)
            assert tc.target_from_tree(alt) == alt.tgt
            assert {tree_key(a) for a in tc.readings(alt)} == keys
            assert sorted(tc.ambiguity_kinds(alt)) == sorted(tc.ambiguity_kinds(ex))


def test_share_of_ambiguous_sentences_and_balanced_attachments():
    exs = tc.generate_examples(3000, seed=4)
    kinds = [tc.ambiguity_kinds(ex) for ex in exs]
    share = sum(bool(k) for k in kinds) / len(exs)
    assert 0.45 < share < 0.65, share
    per_kind = collections.Counter(k for ks in kinds for k in set(ks))
    assert 0.35 < per_kind["pp"] / len(exs) < 0.5, per_kind
    assert 0.08 < per_kind["rel"] / len(exs) < 0.17, per_kind
    assert 0.05 < per_kind["adv"] / len(exs) < 0.11, per_kind
    # the attachment is a coin flip: each side about half of the time
    sides = collections.Counter()
    for ex in exs:
        for kind, node in tc._flip_points(tc._tree_from_example(ex)):
            head_rel = node.head.deprel
            side = {"pp": node.deprel, "rel": head_rel, "adv": head_rel}[kind]
            sides[kind, side] += 1
    for kind, first in (("pp", "nmod"), ("rel", "nmod"), ("adv", "advcl")):
        total = sum(v for (k, _), v in sides.items() if k == kind)
        assert total > 150 and 0.4 < sides[kind, first] / total < 0.6, sides


def test_detokenize():
    assert tc.detokenize(["weil", "er", "schlaeft", ",", "lacht", "sie", "."]) == \
        "weil er schlaeft, lacht sie."
    assert tc.detokenize([]) == ""


def test_written_files_and_conllu_round_trip(tmp_path):
    paths = tc.write_corpus(str(tmp_path), train=25, valid=4, test=6, seed=9,
                            src_lang="en", tgt_lang="de")
    splits = tc.generate_splits({"train": 25, "valid": 4, "test": 6}, seed=9)
    for split, size in (("train", 25), ("valid", 4), ("test", 6)):
        src_lines = (tmp_path / ("%s.en" % split)).read_text(encoding="utf-8").splitlines()
        tgt_lines = (tmp_path / ("%s.de" % split)).read_text(encoding="utf-8").splitlines()
        assert len(src_lines) == len(tgt_lines) == size
        assert paths[split]["conllu"] == str(tmp_path / ("%s.en.conllu" % split))
        text = (tmp_path / ("%s.en.conllu" % split)).read_text(encoding="utf-8")
        assert text.endswith("\n\n")
        sentences = conllu.parse(text)
        assert len(sentences) == size
        for line, tgt, sent, ex in zip(src_lines, tgt_lines, sentences, splits[split]):
            assert line == " ".join(ex.src) and tgt == " ".join(ex.tgt)
            assert sent.metadata["text"] == line
            assert [t["form"] for t in sent] == line.split()
            assert len(sent) == len(line.split())
            assert [t["head"] for t in sent] == list(ex.heads)
            assert [t["deprel"] for t in sent] == list(ex.deprels)
            assert [t["upos"] for t in sent] == list(ex.upos)
            assert all(t["xpos"] is None and t["feats"] is None for t in sent)
            tree = sent.to_tree()  # conllu builds the tree from the heads
            assert tree.token["deprel"] == "root"
        for raw in text.strip("\n").split("\n\n"):
            for row in raw.splitlines():
                if not row.startswith("#"):
                    assert len(row.split("\t")) == 10


def test_cli(tmp_path, capsys):
    tc.cli_main(["--out", str(tmp_path / "c"), "--train", "7", "--valid", "2",
                 "--test", "3", "--seed", "4", "--src-lang", "xx", "--tgt-lang", "yy"])
    out = tmp_path / "c"
    assert len((out / "train.xx").read_text().splitlines()) == 7
    assert len((out / "valid.yy").read_text().splitlines()) == 2
    assert len(conllu.parse((out / "test.xx.conllu").read_text())) == 3
    assert "train: 7 sentences" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        tc.cli_main(["--out", str(tmp_path / "d"), "--train", "-1"])
