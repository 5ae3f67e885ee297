"""CoNLL-U reading (strict, with errors naming file, sentence and line) and
writing, multiword tokens, and a fuzz test: malformed input gives a valid
tree or a StructureError, nothing else."""

import hashlib
import io

import conllu
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairseq_posattn.structure import (
    DependencyTree, StructureError, check_tree, read_conllu, tree_depths, write_conllu,
)
from fairseq_posattn.structure.conllu_io import index_sentences

FAST = settings(max_examples=60, deadline=None)


def tok(tid, form, head, deprel="dep"):
    """One CoNLL-U token line (IDs and heads as given, other columns '_')."""
    return "\t".join([str(tid), form, "_", "_", "_", "_", str(head), deprel, "_", "_"])


def doc(*sentences):
    """Sentences given as lists of lines -> CoNLL-U text."""
    return "".join("\n".join(lines) + "\n\n" for lines in sentences)


def read(text, **kwargs):
    return list(read_conllu(io.StringIO(text), **kwargs))


def naive_depths(heads):
    out = []
    for i in range(len(heads)):
        d, j = 0, i
        while heads[j] != 0:
            j, d = heads[j] - 1, d + 1
        out.append(d)
    return out


def naive_collapse(forms, heads, deprels, ranges):
    """The multiword rule, literally: among the range members whose head lies
    outside the range, the one closest to the root (ties: the first)."""
    depth = naive_depths(heads)
    start = {a: (b, form) for a, b, form in ranges}
    groups, words = [], []
    i = 1
    while i <= len(forms):
        b, form = start.get(i, (i, forms[i - 1]))
        groups.append(list(range(i, b + 1)))
        words.append(form)
        i = b + 1
    node = {w: g + 1 for g, members in enumerate(groups) for w in members}
    new_heads, new_rels = [], []
    for members in groups:
        outside = [w for w in members if heads[w - 1] not in members]
        rep = min(outside, key=lambda w: (depth[w - 1], w))
        new_heads.append(0 if heads[rep - 1] == 0 else node[heads[rep - 1]])
        new_rels.append(deprels[rep - 1])
    return words, new_heads, new_rels


# ---------------------------------------------------------------- reading

CANT = [
    "# sent_id = s1",
    "# text = I can't go",
    tok(1, "I", 4, "nsubj"),
    "2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_",
    tok(2, "ca", 4, "aux"),
    tok(3, "n't", 4, "advmod"),
    tok(4, "go", 0, "root"),
]
FIG1 = [
    "# sent_id = fig1",
    tok(1, "Bush", 2, "nsubj"), tok(2, "held", 0, "root"), tok(3, "a", 4, "det"),
    tok(4, "talk", 2, "obj"), tok(5, "with", 6, "case"), tok(6, "Sharon", 2, "obl"),
]


def test_reads_sentences_with_metadata_and_location(tmp_path):
    path = tmp_path / "two.conllu"
    path.write_text(doc(CANT, FIG1), encoding="utf-8")
    first, second = read_conllu(path)
    assert first == DependencyTree(["I", "can't", "go"], [3, 3, 0], ["nsubj", "aux", "root"],
                                   sent_id="s1", text="I can't go")
    assert (first.source, first.line, first.index) == (str(path), 3, 0)
    assert second.words == ["Bush", "held", "a", "talk", "with", "Sharon"]
    assert second.heads == [2, 0, 4, 2, 6, 2] and second.text is None
    assert (second.line, second.index) == (10, 1)
    assert next(read_conllu(path, source="given")).source == "given"


def test_multiword_range_holding_the_root_and_heads_pointing_into_it():
    # Spanish "dámelo ahora": da (root) me lo; "ahora" -> "da"
    trees = read(doc([
        "1-3\tdámelo\t_\t_\t_\t_\t_\t_\t_\t_",
        tok(1, "da", 0, "root"), tok(2, "me", 1, "iobj"), tok(3, "lo", 1, "obj"),
        tok(4, "ahora", 1, "advmod"),
    ]))
    assert trees[0].words == ["dámelo", "ahora"]
    assert trees[0].heads == [0, 1] and trees[0].deprels == ["root", "advmod"]


@pytest.mark.parametrize("x_head, y_head, expect_head, expect_rel", [
    (2, 1, 1, "y"),  # x -> n (depth 2), y -> v (depth 1): y is closer to the root
    (1, 1, 1, "x"),  # both at depth 1: the first
    (4, 1, 1, "y"),  # x's head is inside the range
    (1, 2, 1, "x"),  # x closer to the root than y
])
def test_multiword_head_is_the_outside_member_closest_to_the_root(x_head, y_head, expect_head,
                                                                  expect_rel):
    tree, = read(doc([
        tok(1, "v", 0, "root"), tok(2, "n", 1, "obj"),
        "3-4\txy\t_\t_\t_\t_\t_\t_\t_\t_", tok(3, "x", x_head, "x"), tok(4, "y", y_head, "y"),
    ]))
    assert tree.words == ["v", "n", "xy"]
    assert tree.heads == [0, 1, expect_head] and tree.deprels[2] == expect_rel


def test_empty_nodes_are_skipped_and_forests_allowed():
    tree, = read(doc([
        tok(1, "a", 0, "root"), "1.1\tgone\t_\t_\t_\t_\t_\t_\t0:root\t_",
        tok(2, "b", 0, "root"), tok(3, "c", 2),
    ]))
    assert tree.heads == [0, 0, 2]
    assert tree_depths(tree.heads).tolist() == [0, 0, 1]


def test_lenient_layout_bom_crlf_blank_runs_and_no_final_blank_line():
    text = ("\ufeff# a comment\r\n" + tok(1, "x", 0) + "\r\n\r\n\r\n \n"
            + tok(1, "y", 0, "_") + "\r\n" + tok(2, "z", 1, "_"))
    a, b = read(text)
    assert (a.words, a.heads, a.line) == (["x"], [0], 2)
    assert (b.words, b.heads, b.deprels, b.line, b.index) == (["y", "z"], [0, 1], None, 6, 1)


def test_texts_must_match_surface_tokens():
    texts = ["I can't go\n", "Bush held a talk with Sharon"]
    assert len(read(doc(CANT, FIG1), texts=texts)) == 2
    assert len(read(doc(CANT, FIG1), texts=iter(texts))) == 2


@pytest.mark.parametrize("texts, line, needle", [
    (["I can't go", "Bush held a talk with"], 10,
     "sentence 2, line 10: the tree has 6 surface tokens but line 2 of the text has 5; "
     "first difference at token 6: tree 'Sharon', text (end)"),
    (["I ca n't go", "x"], 3, "has 3 surface tokens but line 1 of the text has 4; "
                              "first difference at token 2: tree \"can't\", text 'ca'"),
    (["I can't go", "Bush held the talk with Sharon"], 10,
     "the tree's tokens differ from line 2 of the text; first difference at token 3: "
     "tree 'a', text 'the'"),
    (["I can't go"], 10, "more sentences than the text has lines (1)"),
    (["I can't go", "Bush held a talk with Sharon", "more"], None,
     "the file ends after 2 sentences but the text has more lines"),
])
def test_texts_mismatch(texts, line, needle):
    with pytest.raises(StructureError) as err:
        read(doc(CANT, FIG1), texts=texts, source="f.conllu")
    assert needle in str(err.value)
    assert str(err.value).startswith("f.conllu")
    assert "re-parse" in str(err.value)
    if line is not None:
        assert err.value.line == line


GOOD = [tok(1, "a", 2), tok(2, "b", 0, "root"), tok(3, "c", 2)]


@pytest.mark.parametrize("lines, line, needle", [
    (["1 a _ _ _ _ 2 dep _ _", GOOD[1]], 6, "expected 10 tab-separated columns, found 1"),
    ([GOOD[0], GOOD[1] + "\t_"], 7, "found 11"),
    (["x\ta\t_\t_\t_\t_\t0\troot\t_\t_"], 6, "ID 'x' is not a word ID 1, 2, ..."),
    (["0\ta\t_\t_\t_\t_\t0\troot\t_\t_"], 6, "ID '0' is not a word ID 1, 2, ..."),
    (["-1\ta\t_\t_\t_\t_\t0\troot\t_\t_"], 6, "ID '-1' is not a word ID 1, 2, ..."),
    ([tok(99999999999999999999, "a", 0)], 6, "word ID 99999999999999999999 where 1 was expected"),
    ([tok(1, "a", 0), "2-99999999999999999999\tbc\t_\t_\t_\t_\t_\t_\t_\t_", tok(2, "b", 1)],
     7, "range 2-99999999999999999999 goes past the last word 2"),
    ([tok(1, "a", "_")], 6, "HEAD '_' of word 1 is not an integer"),
    ([tok(1, "a", "1e3")], 6, "HEAD '1e3' of word 1 is not an integer"),
    # any integer HEAD, however large or negative, is out of range like any other
    ([tok(1, "a", "-1")], 6, "HEAD -1 of word 1 'a' is out of range 0..1"),
    ([tok(1, "a", 0), tok(2, "b", 99999999999999999999)], 7,
     "HEAD 99999999999999999999 of word 2 'b' is out of range 0..2"),
    ([tok(1, "a", 0), tok(2, "b", -2 ** 70)], 7, "HEAD %d of word 2 'b' is out of range 0..2"
     % -2 ** 70),
    ([tok(1, "a", 0), tok(3, "b", 1)], 7, "word ID 3 where 2 was expected"),
    ([tok(1, "a", 0), tok(1, "b", 0)], 7, "blank line between two sentences missing"),
    ([GOOD[0], GOOD[1], tok(3, "c", 7)], 8, "HEAD 7 of word 3 'c' is out of range 0..3"),
    ([tok(1, "a", 0), tok(2, "b", 3), tok(3, "c", 2)], 7,
     "the heads form a cycle: 2 'b' -> 3 'c' -> 2 'b'"),
    ([tok(1, "a", 0), tok(2, "b", 2)], 7, "cycle: 2 'b' -> 2 'b'"),
    ([tok(1, "a", 2), tok(2, "b", 1)], 6, "no word has HEAD 0"),
    (["# only a comment"], 5, "has no words"),
    (["1.1\ta\t_\t_\t_\t_\t_\t_\t_\t_"], 6, "has no words"),
    ([tok(1, "a", 0), "2-3\tbc\t_\t_\t_\t_\t_\t_\t_\t_", tok(2, "b", 1)], 7,
     "range 2-3 goes past the last word 2"),
    (["1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_", "1-3\tabc\t_\t_\t_\t_\t_\t_\t_\t_"], 7,
     "overlaps range 1-2"),
    ([tok(1, "a", 0), "1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_"], 7,
     "range 1-2 where a range starting at word 2 was expected"),
    (["2-2\tab\t_\t_\t_\t_\t_\t_\t_\t_"], 6, "at least two words"),
    (["1\t\t_\t_\t_\t_\t0\troot\t_\t_"], 6, "column FORM is empty"),
])
def test_errors_name_file_sentence_line_and_what_to_do(tmp_path, lines, line, needle):
    path = tmp_path / "bad.conllu"
    path.write_text(doc(GOOD, ["# sent_id = 2"] + lines, GOOD), encoding="utf-8")
    with pytest.raises(StructureError) as err:
        list(read_conllu(path))
    message = str(err.value)
    prefix = "%s, sentence 2, line %d: " % (path, line)
    assert message.startswith(prefix), message
    assert needle in message
    assert (err.value.source, err.value.sentence, err.value.line) == (str(path), 2, line)
    assert ". " in message[len(prefix):]  # "<problem>. <what to do>"


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.conllu"
    path.write_bytes((doc(GOOD) + tok(1, "caf\xe9", 0)).encode("latin-1"))
    with pytest.raises(StructureError, match="line 5: the line is not valid UTF-8"):
        list(read_conllu(path))


NEVER_UTF8 = [b"\xff", b"\xfe", b"\xc0", b"\xf8"]  # bytes no UTF-8 text holds


@st.composite
def bad_byte_documents(draw):
    """A valid CoNLL-U file (multibyte forms, LF or CRLF) as bytes with a byte
    that is never UTF-8 put into one line, and that line's 1-based number."""
    lines = [line for s, _ in draw(st.lists(conllu_sentences(), min_size=1, max_size=3))
             for line in s + [""]]
    end = draw(st.sampled_from([b"\n", b"\r\n"]))
    raw = [line.encode("utf-8") for line in lines]
    i = draw(st.integers(0, len(raw) - 1))
    at = draw(st.integers(0, len(raw[i])))
    raw[i] = raw[i][:at] + draw(st.sampled_from(NEVER_UTF8)) + raw[i][at:]
    return b"".join(line + end for line in raw), i + 1


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad_byte_documents(), st.integers(1, 3))
def test_a_byte_that_is_not_utf8_is_reported_on_its_line(tmp_path, case, every):
    """Read as a path, as a binary file and in parts (fairseq-posattn-parse's
    conllu check and fairseq-posattn-preprocess read it that way)."""
    data, line = case
    path = tmp_path / "bad.conllu"
    path.write_bytes(data)
    index = index_sentences(str(path), every)
    readings = [lambda: list(read_conllu(path)),
                lambda: list(read_conllu(io.BytesIO(data), source=str(path))),
                lambda: [t for k in range(len(index.starts)) for t in index.read_part(k)]]
    for reading in readings:
        with pytest.raises(StructureError) as err:
            reading()
        assert err.value.line == line
        assert str(err.value).startswith("%s, line %d: the line is not valid UTF-8" % (path, line))


# ---------------------------------------------------------------- reading in parts

BLANK = ["", " ", " \t ", "\u00a0", "\u3000", "\t\u00a0", "\x1c\t"]  # every one ends a sentence


@st.composite
def odd_layouts(draw):
    """Valid sentences in a lenient layout, as bytes: BOM, blank and
    whitespace-only lines (runs of them, before, between and after the
    sentences), comment lines, CRLF or LF, maybe no final line break."""
    lines = draw(st.lists(st.sampled_from(BLANK), max_size=2))
    for s in range(draw(st.integers(1, 7))):
        if s:
            lines += draw(st.lists(st.sampled_from(BLANK), min_size=1, max_size=3))
        lines += draw(st.lists(st.sampled_from(["# sent_id = %d" % s, "# a comment", "#"]),
                               max_size=2))
        n = draw(st.integers(1, 4))
        lines += [tok(w, "w%d.%d" % (s, w), w - 1) for w in range(1, n + 1)]
    lines += draw(st.lists(st.sampled_from(BLANK), max_size=2))
    ends = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines),
                         max_size=len(lines)))
    text = "".join(line + end for line, end in zip(lines, ends))
    if draw(st.booleans()):
        text = text[:-len(ends[-1])]
    return (("\ufeff" if draw(st.booleans()) else "") + text).encode("utf-8")


def where(tree):
    return tree.words, tree.heads, tree.deprels, tree.sent_id, tree.line, tree.index


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(odd_layouts(), st.integers(1, 4))
def test_index_parts_read_like_the_whole_file(tmp_path, data, every):
    path = tmp_path / "odd.conllu"
    path.write_bytes(data)
    whole = list(read_conllu(path))
    index = index_sentences(str(path), every)
    assert (index.sentences, index.size) == (len(whole), len(data))
    assert index.sha256 == hashlib.sha256(data).hexdigest()
    parts = [list(index.read_part(k)) for k in range(len(index.starts) + 1)]
    assert [len(part) for part in parts[:-2]] == [every] * (len(parts) - 2)
    assert parts[-1] == []  # past the last sentence
    assert [where(t) for part in parts for t in part] == [where(t) for t in whole]


ODD = "".join([
    "\ufeff# newdoc id = odd\r\n", "# sent_id = 1\r\n", tok(1, "a", 0) + "\r\n",
    tok(2, "b", 1) + "\r\n", "\r\n", "\n", " \t\n",
    "# only\n", "# comments\n", tok(1, "c", 0) + "\n", "\u00a0\n",
    "1-2\tde\t_\t_\t_\t_\t_\t_\t_\t_\n", tok(1, "d", 0) + "\n", tok(2, "e", 1) + "\n",
    tok(3, "f", 1) + "\n", "\n", "\u3000\n", "\n",
    tok(1, "g", 0) + "\n", "\n",
    tok(1, "h", 2) + "\n", tok(2, "i", 0),  # no final line break
])


@pytest.mark.parametrize("every", [1, 2, 3, 5])
def test_index_part_errors_count_from_the_start_of_the_file(tmp_path, every):
    """Texts that do not match: reading chunk by chunk as fairseq-posattn-parse
    does (the last chunk of the text to the end of the file) fails with the
    message of reading the whole file."""
    path = tmp_path / "odd.conllu"
    path.write_bytes(ODD.encode("utf-8"))
    texts = [" ".join(t.words) for t in read_conllu(path)]
    assert texts == ["a b", "c", "de f", "g", "h i"]
    index = index_sentences(str(path), every)
    wrong = [texts[:s] + ["x y"] + texts[s + 1:] for s in range(len(texts))]
    for bad in wrong + [texts[:-1], texts + ["one more"], texts + ["one", "two"]]:
        with pytest.raises(StructureError) as expected:
            list(read_conllu(path, texts=bad))
        chunks = -(-len(bad) // every)
        with pytest.raises(StructureError) as got:
            for k in range(chunks):
                list(index.read_part(k, texts=bad[k * every:(k + 1) * every],
                                     last=k == chunks - 1))
        assert str(got.value) == str(expected.value)
        assert (got.value.sentence, got.value.line) == \
            (expected.value.sentence, expected.value.line)


# ---------------------------------------------------------------- writing

def test_write_exact_format(tmp_path):
    trees = [DependencyTree(["Bush", "held"], [2, 0], sent_id="a", text="Bush held"),
             DependencyTree(["x", "y"], [0, 1], deprels=["root", "nmod"])]
    path = tmp_path / "out.conllu"
    assert write_conllu(trees, path) == 2
    assert path.read_text(encoding="utf-8") == (
        "# sent_id = a\n# text = Bush held\n"
        "1\tBush\t_\t_\t_\t_\t2\tdep\t_\t_\n2\theld\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
        "1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n2\ty\t_\t_\t_\t_\t1\tnmod\t_\t_\n\n"
    )


@pytest.mark.parametrize("tree, needle", [
    (DependencyTree(["a", "b", "c"], [0, 3, 2]), "cycle: 2 'b' -> 3 'c' -> 2 'b'"),
    (DependencyTree(["a", "b"], [0]), "2 words but 1 heads"),
    (DependencyTree(["a"], [0], deprels=["root", "x"]), "1 words but 2 deprels"),
    (DependencyTree(["a\tb"], [0]), "word 1 is 'a\\tb'"),
    (DependencyTree(["a"], [0], deprels=["two words"]), "deprel 1"),
    (DependencyTree(["a"], [0], text="a\nb"), "line break"),
])
def test_write_rejects_bad_trees(tree, needle):
    out = io.StringIO()
    with pytest.raises(StructureError) as err:
        write_conllu([DependencyTree(["ok"], [0]), tree], out)
    assert needle in str(err.value) and str(err.value).startswith("sentence 2: ")


words_st = st.text("abcxyzé'.-_", min_size=1, max_size=5)


@st.composite
def dep_trees(draw, max_n=15):
    n = draw(st.integers(1, max_n))
    order = draw(st.permutations(range(n)))
    roots = draw(st.integers(1, min(2, n)))
    heads = [0] * n
    for i in range(roots, n):
        heads[order[i]] = order[draw(st.integers(0, i - 1))] + 1
    words = draw(st.lists(words_st, min_size=n, max_size=n))
    deprels = draw(st.lists(st.sampled_from(["nsubj", "obj", "acl:relcl", "det"]),
                            min_size=n, max_size=n))
    return heads, words, deprels


@FAST
@given(st.lists(dep_trees(), max_size=4), st.booleans())
def test_round_trip_and_conllu_package_reads_our_output(raw, with_meta):
    trees = [DependencyTree(w, h, r, sent_id="s%d" % i if with_meta else None,
                            text=" ".join(w) if with_meta else None)
             for i, (h, w, r) in enumerate(raw)]
    out = io.StringIO()
    assert write_conllu(trees, out) == len(trees)
    text = out.getvalue()
    assert read(text) == trees
    parsed = conllu.parse(text)
    assert len(parsed) == len(trees)
    for sent, tree in zip(parsed, trees):
        assert [t["form"] for t in sent] == tree.words
        assert [t["head"] for t in sent] == tree.heads
        assert [t["deprel"] for t in sent] == tree.deprels
        assert sent.metadata.get("sent_id") == tree.sent_id
        assert sent.metadata.get("text") == tree.text


# ---------------------------------------------------------------- multiword property

@st.composite
def conllu_sentences(draw):
    """A valid CoNLL-U sentence with multiword ranges and empty nodes, and the
    tree the multiword rule gives for it."""
    heads, forms, deprels = draw(dep_trees())
    n = len(heads)
    ranges, i = [], 1
    while i < n:
        span = draw(st.sampled_from([0, 0, 2, 3]))
        if span and i + span - 1 <= n:
            ranges.append((i, i + span - 1, "".join(forms[i - 1:i + span - 1]) + "~"))
            i += span
        else:
            i += 1
    start = {a: (a, b, f) for a, b, f in ranges}
    lines = ["# sent_id = x"] if draw(st.booleans()) else []
    for w in range(1, n + 1):
        if w in start:
            a, b, f = start[w]
            lines.append("%d-%d\t%s\t_\t_\t_\t_\t_\t_\t_\t_" % (a, b, f))
        lines.append(tok(w, forms[w - 1], heads[w - 1], deprels[w - 1]))
        if draw(st.integers(0, 9)) == 0:
            lines.append("%d.1\tnull\t_\t_\t_\t_\t_\t_\t%d:dep\t_" % (w, heads[w - 1]))
    return lines, naive_collapse(forms, heads, deprels, ranges)


@FAST
@given(st.lists(conllu_sentences(), min_size=1, max_size=3))
def test_multiword_collapse_matches_the_literal_rule(sents):
    trees = read(doc(*[lines for lines, _ in sents]),
                 texts=[" ".join(words) for _, (words, _, _) in sents])
    for tree, (_, (words, heads, deprels)) in zip(trees, sents):
        assert (tree.words, tree.heads, tree.deprels) == (words, heads, deprels)
        check_tree(tree.heads)


# ---------------------------------------------------------------- fuzz

JUNK = ["", "_", "0", "1", "2", "-1", "99", "1-2", "2-1", "1-9", "3.1", "0.1", "a", " 1",
        "01", "\u0663", "1_0", "1e3", "\t", "#", "# text = a b", "2-3", "1.0",
        "99999999999999999999", "-99999999999999999999", "1-99999999999999999999",
        "99999999999999999999.1", "18446744073709551616"]
# integers of every size: small ones re-attach words, the others are far beyond
# 64 bits, negative or at the edges of int64
BIG = st.one_of(st.integers(-(2 ** 200), 2 ** 200), st.integers(2 ** 63 - 2, 2 ** 64 + 2),
                st.integers(-(2 ** 64) - 2, -(2 ** 63) + 2))


@st.composite
def mutated(draw):
    """Valid CoNLL-U text with random damage, and a texts list (maybe wrong)."""
    sents = draw(st.lists(conllu_sentences(), min_size=1, max_size=3))
    lines = [line for s, _ in sents for line in s + [""]]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["del", "dup", "swap", "col", "merge", "split", "insert",
                                   "cut", "head", "head", "bigint"]))
        i = draw(st.integers(0, len(lines) - 1)) if lines else 0
        if not lines:
            lines.append(draw(st.sampled_from(JUNK)))
        elif op == "del":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "head":  # re-attach a word: cycles, lost roots, out of range
            cols = lines[i].split("\t")
            if len(cols) == 10:
                cols[6] = str(draw(st.integers(0, 16)))
                lines[i] = "\t".join(cols)
        elif op == "bigint":  # an ID, a range's end or a HEAD of any size
            cols = lines[i].split("\t")
            if len(cols) == 10:
                value = str(draw(BIG))
                c = draw(st.sampled_from([0, 0, 6, 6, 6]))
                range_start = cols[0].split("-")[0]
                cols[c] = "%s-%s" % (range_start, value) if "-" in cols[0] and c == 0 else value
                lines[i] = "\t".join(cols)
        elif op in ("col", "merge", "split"):
            cols = lines[i].split("\t")
            c = draw(st.integers(0, len(cols) - 1))
            if op == "col":
                cols[c] = draw(st.one_of(st.sampled_from(JUNK), st.text(max_size=4)))
            elif op == "merge" and c + 1 < len(cols):
                cols[c:c + 2] = [cols[c] + " " + cols[c + 1]]
            else:
                cols.insert(c, draw(st.sampled_from(JUNK)))
            lines[i] = "\t".join(cols)
        elif op == "insert":
            lines.insert(i, draw(st.one_of(st.sampled_from(JUNK), st.text(max_size=12))))
        else:
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    texts = None
    choice = draw(st.integers(0, 2))
    if choice:
        texts = [" ".join(words) for _, (words, _, _) in sents]
        if choice == 2 and texts:
            texts = draw(st.permutations(texts))[: draw(st.integers(0, len(texts) + 1))]
    return "\n".join(lines), texts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_malformed_input_gives_valid_trees_or_structure_error(case):
    text, texts = case
    try:
        trees = read(text, texts=texts, source="fuzz.conllu")
    except StructureError as err:
        assert str(err).startswith("fuzz.conllu") and ". " in str(err)
        return
    for i, tree in enumerate(trees):
        check_tree(tree.heads)
        assert len(tree.words) == len(tree.heads) and all(tree.words)
        assert tree.deprels is None or len(tree.deprels) == len(tree.words)
        assert tree.index == i
        if texts is not None:
            assert tree.words == texts[i].split()
