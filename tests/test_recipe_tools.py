"""The Python helpers of the recipes (fairseq_posattn/recipes/): text
preparation, BLEU, checkpoint averaging, architecture plans."""

import math
import re
from collections import Counter

import pytest
import torch

from fairseq_posattn.errors import DamagedCheckpointError
from fairseq_posattn.recipes import arch_plan, checkpoint_average, corpus, scoring
from fairseq_posattn.structure import words_from_pieces


def naive_bleu(hyps, refs_list):
    """BLEU-4 by the definition (Papineni et al. 2002): clipped n-gram
    precisions over the corpus, closest reference length (shorter on ties),
    brevity penalty; no smoothing (every precision must be > 0)."""
    matches, totals, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for i, hyp in enumerate(hyps):
        h = hyp.split()
        refs = [r[i].split() for r in refs_list]
        hyp_len += len(h)
        ref_len += min((abs(len(r) - len(h)), len(r)) for r in refs)[1]
        for n in range(1, 5):
            grams = Counter(tuple(h[k:k + n]) for k in range(len(h) - n + 1))
            most = Counter()
            for r in refs:
                ref_grams = Counter(tuple(r[k:k + n]) for k in range(len(r) - n + 1))
                for gram, count in ref_grams.items():
                    most[gram] = max(most[gram], count)
            matches[n - 1] += sum(min(c, most[g]) for g, c in grams.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    assert min(matches) > 0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * brevity * math.exp(log_precision)


def naive_split_compounds(line):
    """Perl's s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g, scanning left to right: a
    match consumes its three characters, the scan goes on after them."""
    out, i = [], 0
    while i < len(line):
        if i + 2 < len(line) and not line[i].isspace() and line[i + 1] == "-" \
                and not line[i + 2].isspace():
            out.append(line[i] + " ##AT##-##AT## " + line[i + 2])
            i += 3
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


# ---------------------------------------------------------------------------
# BLEU

@pytest.mark.parametrize("line", [
    "Nord-Süd-Verbindung", "a-b-c-d", "-a", "a-", "a - b", "x--y", "E-Mail-Adresse ist ok-",
    "3-4 mal", "ab-cd ef-gh", "a @-@ b", "",
])
def test_split_compounds_matches_perl_semantics(line):
    assert scoring.split_compounds(line) == naive_split_compounds(line)


def test_split_compounds_examples():
    assert scoring.split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert scoring.split_compounds("die E-Mail") == "die E ##AT##-##AT## Mail"
    # 'd-S' is consumed, the scan goes on at 'ü' and finds 'd-V'
    assert scoring.split_compounds("Nord-Süd-Verbindung") == \
        "Nord ##AT##-##AT## Süd ##AT##-##AT## Verbindung"


def test_compound_split_bleu_is_tokenized_bleu_of_the_split_tokens():
    hyps = ["Die Nord-Süd-Verbindung ist sehr gut, sagte er.",
            "Er schrieb eine E-Mail an die Stadt-Verwaltung."]
    refs = ["Die Nord-Süd-Verbindung ist gut, sagte er heute.",
            "Er schrieb gestern eine E-Mail an die Stadt-Verwaltung."]
    # Moses-tokenized (no -a) and compound-split, written out by hand
    hyps_split = ["Die Nord ##AT##-##AT## Süd ##AT##-##AT## Verbindung ist sehr gut , sagte er .",
                  "Er schrieb eine E ##AT##-##AT## Mail an die Stadt ##AT##-##AT## Verwaltung ."]
    refs_split = ["Die Nord ##AT##-##AT## Süd ##AT##-##AT## Verbindung ist gut , sagte er heute .",
                  "Er schrieb gestern eine E ##AT##-##AT## Mail an die "
                  "Stadt ##AT##-##AT## Verwaltung ."]
    result = scoring.compound_split_score(hyps, [refs], "de")
    assert result["score"] == pytest.approx(naive_bleu(hyps_split, [refs_split]), abs=1e-9)
    assert "tok:none" in result["signature"] and "case:mixed" in result["signature"]


def write_generate_output(path, hyps_by_id):
    lines = ["S-%d\tsource\n" % i for i in hyps_by_id]
    lines += ["H-%d\t-0.5\t%s\n" % (i, h) for i, h in hyps_by_id.items()]
    path.write_text("".join(lines), encoding="utf-8")


def test_read_hypotheses_orders_by_id_and_refuses_gaps(tmp_path):
    gen = tmp_path / "gen.txt"
    write_generate_output(gen, {1: "b", 0: "a", 2: "c"})
    assert scoring.read_hypotheses(str(gen)) == ["a", "b", "c"]
    write_generate_output(gen, {0: "a", 2: "c"})
    with pytest.raises(scoring.ScoringError, match=r"no hypothesis for sentences \[1\]"):
        scoring.read_hypotheses(str(gen))
    gen.write_text("H-0\t-1\ta\nH-0\t-2\tb\n", encoding="utf-8")
    with pytest.raises(scoring.ScoringError, match="line 2: a second hypothesis for sentence 0"):
        scoring.read_hypotheses(str(gen))


def test_score_set_detokenizes_and_uses_every_reference(tmp_path):
    gen = tmp_path / "gen.txt"
    write_generate_output(gen, {0: "Die Nord @-@ Süd @-@ Verbindung kostet 3,5 Mio. € .",
                                1: "Hallo , \" Welt \" !"})
    ref0 = tmp_path / "ref0"
    ref1 = tmp_path / "ref1"
    ref0.write_text("Die Verbindung kostet viel.\nHallo, Welt!\n", encoding="utf-8")
    ref1.write_text("die nord-süd-verbindung kostet 3,5 mio. €.\nhallo, \"welt\"!\n",
                    encoding="utf-8")
    hyp_out = tmp_path / "hyp"
    result = scoring.score_set(str(gen), [str(ref0)], "de", str(hyp_out))
    assert hyp_out.read_text(encoding="utf-8").splitlines() == [
        "Die Nord-Süd-Verbindung kostet 3,5 Mio. €.", 'Hallo, "Welt"!']
    one_ref = result["sacrebleu"]["score"]
    assert one_ref < 100 and "nrefs:1" in result["sacrebleu"]["signature"]
    # the second reference is the hypothesis in lower case
    both = scoring.score_set(str(gen), [str(ref0), str(ref1)], "de", str(hyp_out), lowercase=True)
    assert both["sacrebleu"]["score"] == pytest.approx(100)
    assert "nrefs:2|case:lc" in both["sacrebleu"]["signature"]
    cased = scoring.score_set(str(gen), [str(ref0), str(ref1)], "de", str(hyp_out))
    assert one_ref <= cased["sacrebleu"]["score"] < 100
    ref0.write_text("only one line\n", encoding="utf-8")
    with pytest.raises(scoring.ScoringError, match="has 1 lines but .* has 2 hypotheses"):
        scoring.score_set(str(gen), [str(ref0)], "de", str(hyp_out))


def test_summary_averages_the_sets():
    results = [{"sacrebleu": {"score": 40.0}}, {"sacrebleu": {"score": 45.5}}]
    table = scoring.summary(results, ["mt03", "mt04"]).splitlines()
    assert table[0].split() == ["set", "sacreBLEU"]
    assert [row.split() for row in table[1:]] == [
        ["mt03", "40.00"], ["mt04", "45.50"], ["average", "42.75"]]


# ---------------------------------------------------------------------------
# text

def test_tokenize_moses_style_in_parallel_and_alone():
    lines = ['Die Nord-Süd-Verbindung kostet 3,5 Mio. € & mehr "Geld".', "", "Ein\u200bTest"] * 3
    alone = list(corpus.tokenize_lines(lines, "de", aggressive_dashes=True, workers=1))
    assert alone[0] == 'Die Nord @-@ Süd @-@ Verbindung kostet 3,5 Mio. € & mehr " Geld " .'
    assert alone[1] == ""
    assert list(corpus.tokenize_lines(lines, "de", aggressive_dashes=True, workers=2)) == alone
    plain = list(corpus.tokenize_lines(lines[:1], "de"))
    assert plain[0].startswith("Die Nord-Süd-Verbindung kostet")


def test_udpipe_segmenter_keeps_one_line_per_line():
    segmenter = corpus.build_segmenter("udpipe", "zh")
    lines = ["我们今天去北京。他说：“好的！”", "", "中国经济"]
    out = segmenter.segment(lines)
    assert len(out) == 3 and out[1] == ""
    for raw, segmented in zip(lines, out):
        assert segmented.replace(" ", "") == raw  # only spaces are added
    assert len(out[0].split()) > 5


def test_stanza_segmenter_without_models_names_the_variable(tmp_path):
    pytest.importorskip("stanza")
    with pytest.raises(corpus.CorpusError, match="(?s)no stanza models in .*set STANZA_DIR"):
        corpus.build_segmenter("stanza", "zh", stanza_dir=str(tmp_path))


@pytest.mark.parametrize("src,tgt", [(1, 1), (0, 3), (3, 0), (4, 6), (4, 7), (10, 16),
                                     (250, 250), (251, 200), (2, 3)])
def test_keep_pair_is_clean_corpus_n(src, tgt):
    min_len, max_len, ratio = 1, 250, 1.5
    expected = (min_len <= src <= max_len and min_len <= tgt <= max_len
                and src <= ratio * tgt and tgt <= ratio * src)
    assert corpus.keep_pair(src, tgt, min_len, max_len, ratio) == expected


def test_clean_corpus_keeps_aligned_pairs(tmp_path):
    src, tgt = tmp_path / "s", tmp_path / "t"
    src.write_text("a b\n\na  b c\none two three four\nx\n", encoding="utf-8")
    tgt.write_text("A B\nempty source\nA B C\neins\ny z\n", encoding="utf-8")
    kept, total = corpus.clean_corpus(str(src), str(tgt), str(tmp_path / "so"),
                                      str(tmp_path / "to"), 1, 250, 1.5)
    assert (kept, total) == (2, 5)
    assert (tmp_path / "so").read_text() == "a b\na b c\n"
    assert (tmp_path / "to").read_text() == "A B\nA B C\n"
    tgt.write_text("A B\n", encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match="different numbers of lines"):
        corpus.clean_corpus(str(src), str(tgt), str(tmp_path / "so"), str(tmp_path / "to"),
                            1, 250, 1.5)


SOURCE_SGM = """<srcset setid="mt03" srclang="zh">
<doc docid="A" sysid="src">
<seg id="1">  一  二 </seg>
<seg id=2>三</seg>
</doc>
<DOC docid="B">
<seg id="1">四
五</seg>
</DOC>
</srcset>
"""
# two references in one file, documents in another order than the source
REFS_SGM = """<refset setid="mt03" trglang="en">
<doc docid="B" sysid="r1"><seg id="1">four five (r1)</seg></doc>
<doc docid="A" sysid="r1"><seg id="2">three (r1)</seg><seg id="1">one two (r1)</seg></doc>
<doc docid="A" sysid="r2"><seg id="1">one two (r2)</seg><seg id="2">three (r2)</seg></doc>
<doc docid="B" sysid="r2"><seg id="1">four &amp; five (r2)</seg></doc>
</refset>
"""


def test_sgm_test_set_aligns_references_by_document_and_segment(tmp_path):
    (tmp_path / "src.sgm").write_text(SOURCE_SGM, encoding="utf-8")
    (tmp_path / "ref.sgm").write_text(REFS_SGM, encoding="utf-8")
    source, refs = corpus.sgm_test_set(str(tmp_path / "src.sgm"), [str(tmp_path / "ref.sgm")])
    assert source == ["一 二", "三", "四 五"]
    assert refs == [["one two (r1)", "three (r1)", "four five (r1)"],
                    ["one two (r2)", "three (r2)", "four &amp; five (r2)"]]


def test_sgm_test_set_names_a_missing_segment(tmp_path):
    (tmp_path / "src.sgm").write_text(SOURCE_SGM, encoding="utf-8")
    (tmp_path / "ref.sgm").write_text(REFS_SGM.replace('<seg id="2">three (r2)</seg>', ""),
                                      encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match=r"ref.sgm \(sysid 'r2'\) has 2 segments for "
                                                 r"the 3 of .*missing e.g. document A segment 2"):
        corpus.sgm_test_set(str(tmp_path / "src.sgm"), [str(tmp_path / "ref.sgm")])
    (tmp_path / "bad.sgm").write_bytes('<doc docid="A"><seg id=1>中</seg></doc>'.encode("gb18030"))
    with pytest.raises(corpus.CorpusError, match="is not UTF-8.*iconv -f GB18030"):
        corpus.read_sgm(str(tmp_path / "bad.sgm"))


def test_sentencepiece_pieces_spell_the_tokens(tmp_path):
    text = tmp_path / "train.txt"
    sentences = ["Die Nord @-@ Süd @-@ Verbindung kostet 3,5 Mio. € .",
                 "the old teacher has read the letter , because the cat sleeps ."]
    text.write_text("\n".join(sentences * 40) + "\n", encoding="utf-8")
    corpus.spm_train([str(text)], str(tmp_path / "spm"), 60, "bpe", 1.0, 1000)
    unseen = ["Ωmega ＡＢ  teacher", "ein Brief"]
    for line, pieces in zip(sentences + unseen,
                            corpus.spm_encode(str(tmp_path / "spm.model"), sentences + unseen)):
        assert words_from_pieces(pieces.split(), "sentencepiece") == line.split()


# ---------------------------------------------------------------------------
# checkpoint averaging

def test_average_model_states_is_the_elementwise_mean():
    g = torch.Generator().manual_seed(0)
    states = [{"model": {"w": torch.randn(3, 4, generator=g),
                         "h": torch.randn(5, generator=g).half(),
                         "steps": torch.tensor([7, 8])}} for _ in range(3)]
    averaged = checkpoint_average.average_model_states(states, ["a", "b", "c"])
    assert list(averaged) == ["w", "h", "steps"]
    for key in ("w", "h"):
        reference = torch.stack([s["model"][key].double() for s in states]).mean(0)
        assert averaged[key].dtype == states[0]["model"][key].dtype
        assert torch.allclose(averaged[key].double(), reference,
                              atol=1e-3 if key == "h" else 1e-7)
    assert torch.equal(averaged["steps"], torch.tensor([7, 8]))
    states[2]["model"]["steps"] = torch.tensor([7, 9])
    with pytest.raises(checkpoint_average.AverageError,
                       match="integer tensor steps differs between a and c"):
        checkpoint_average.average_model_states(states, ["a", "b", "c"])
    states[1]["model"] = {"w": states[1]["model"]["w"]}
    with pytest.raises(checkpoint_average.AverageError, match="b has other parameters than a"):
        checkpoint_average.average_model_states(states, ["a", "b", "c"])


def test_last_checkpoints_follow_training_order(tmp_path):
    names = ["checkpoint_1_100.pt", "checkpoint1.pt", "checkpoint_2_150.pt", "checkpoint_2_200.pt",
             "checkpoint2.pt", "checkpoint_3_300.pt", "checkpoint_best.pt", "checkpoint_last.pt",
             "checkpoint_avg5.pt", "checkpoint10.pt.tmp"]
    for name in names:
        (tmp_path / name).touch()

    def saved_after(name, updates):
        torch.save({"optimizer_history": [{"num_updates": updates}]}, tmp_path / name)

    saved_after("checkpoint_3_300.pt", 300)
    saved_after("checkpoint_last.pt", 300)  # written with checkpoint_3_300.pt: nothing newer
    last = checkpoint_average.last_checkpoints(str(tmp_path), 3)
    assert [p.rsplit("/", 1)[1] for p in last] == ["checkpoint_2_200.pt", "checkpoint2.pt",
                                                   "checkpoint_3_300.pt"]
    with pytest.raises(checkpoint_average.AverageError, match="has 6 .* 7 wanted"):
        checkpoint_average.last_checkpoints(str(tmp_path), 7)
    # stopped by --max-update after 330 updates, before the next numbered checkpoint
    saved_after("checkpoint_last.pt", 330)
    last = checkpoint_average.last_checkpoints(str(tmp_path), 3)
    assert [p.rsplit("/", 1)[1] for p in last] == ["checkpoint2.pt", "checkpoint_3_300.pt",
                                                   "checkpoint_last.pt"]
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    with pytest.raises(DamagedCheckpointError, match="checkpoint_last.pt: the checkpoint is empty"):
        checkpoint_average.last_checkpoints(str(tmp_path), 3)


# ---------------------------------------------------------------------------
# architecture plans

@pytest.mark.parametrize("arch,extra,task,size", [
    ("transformer", [], "translation", "base"),
    ("transformer_vaswani_wmt_en_de_big", [], "translation", "big"),
    ("onlstm_san_transformer_big", [], "translation", "big"),
    ("transformer_lstm6_san4", [], "translation", "base"),
    ("transformer_struct", [], "translation_struct", "base"),
    ("transformer_posattn_big", ["--relative-positions"], "translation", "big"),
    ("transformer_posattn_big", ["--structural-relative-positions"], "translation_struct", "big"),
])
def test_arch_plan(arch, extra, task, size):
    plan = arch_plan.plan(arch, extra)
    assert (plan["TASK"], plan["SIZE"]) == (task, size)
    assert re.fullmatch(r"\d+", plan["GPUS"])
