"""The recipes in examples/ end to end on tiny made-up data: every step after
the download (raw files in the recipe's own layout -> tokenization/segmentation
-> cleaning -> subwords -> binarization -> parsing and trees -> training ->
checkpoint averaging -> decoding -> BLEU -> paired bootstrap), with a tiny
model and a few updates.  The raw text comes from the toy corpus, dressed up
as the WMT14, NIST and Multi30k files (sgm, several references, Chinese)."""

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO, run, run_cli_in_process, translates_as_the_test_set

from fairseq_posattn.toy_corpus import detokenize, generate_splits

pytestmark = pytest.mark.slow  # command lines, recipes, training

# A model that trains and decodes in seconds: 3 updates, a checkpoint after
# each, the last 2 averaged.
TINY = {
    "MODEL_ARGS": "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 "
                  "--decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
                  "--encoder-attention-heads 2 --decoder-attention-heads 2",
    "MAX_TOKENS": "1000", "UPDATE_FREQ": "1", "MAX_UPDATE": "3", "SAVE_INTERVAL": "1",
    "AVG": "2", "WARMUP": "1", "LR": "1e-3", "LOG_INTERVAL": "1", "NGPUS": "0",
    "WORKERS": "1", "THREADS": "1", "BPE_MERGES": "100", "SPM_VOCAB": "120",
    "SACREBLEU_TESTSET": "", "TIME_LIMIT_HOURS": "", "TRAIN_SIZE": "",
}
SIZES = {"train": 48, "dev": 6, "test": 6}


def toy_text(seed):
    """Raw-looking (capitalised, detokenized) English and German-like pairs,
    some with hyphenated words."""
    splits = generate_splits(SIZES, seed=seed)
    out = {}
    for split, examples in splits.items():
        pairs = []
        for i, ex in enumerate(examples):
            en, de = detokenize(ex.src), detokenize(ex.tgt)
            if i % 3 == 0:
                en, de = en[:-1] + " by e-mail.", de[:-1] + " per E-Mail."
            pairs.append((en[0].upper() + en[1:], de[0].upper() + de[1:]))
        out[split] = pairs
    return out


def write_lines(path: Path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def sgm(kind, systems, segments_per_doc=4):
    """An SGML test set: ``systems`` maps sysid -> segments; documents of
    ``segments_per_doc`` segments, listed in reverse order for references so
    that reading them needs the docid/seg id alignment."""
    parts = ["<%s setid=\"toy\" srclang=\"any\">" % kind]
    for sysid, segments in systems.items():
        docs = [segments[k:k + segments_per_doc] for k in range(0, len(segments), segments_per_doc)]
        order = range(len(docs)) if kind == "srcset" else reversed(range(len(docs)))
        for d in order:
            parts.append('<doc docid="doc%d" sysid="%s">' % (d, sysid))
            parts.extend('<seg id="%d"> %s </seg>' % (i + 1, text)
                         for i, text in enumerate(docs[d]))
            parts.append("</doc>")
    parts.append("</%s>" % kind)
    return parts


def recipe(name, env, work, timeout=400):
    proc = run(["bash", REPO / "examples" / name / "run.sh"],
               env={**TINY, "WORK": str(work), **env}, timeout=timeout)
    return proc.stdout + proc.stderr


# ---------------------------------------------------------------------------
# WMT14 En-De: the raw files as the WMT archives unpack

@pytest.fixture(scope="module")
def wmt_data(tmp_path_factory):
    data = tmp_path_factory.mktemp("wmt14")
    text = toy_text(seed=5)
    train = text["train"]
    corpora = ["training/europarl-v7.de-en", "commoncrawl.de-en",
               "training/news-commentary-v12.de-en"]
    for k, corpus in enumerate(corpora):
        part = train[k::3]
        write_lines(data / (corpus + ".en"), [en for en, _ in part])
        write_lines(data / (corpus + ".de"), [de for _, de in part])
    write_lines(data / "dev/newstest2013.en", [en for en, _ in text["dev"]])
    write_lines(data / "dev/newstest2013.de", [de for _, de in text["dev"]])
    write_lines(data / "test-full/newstest2014-deen-src.en.sgm",
                sgm("srcset", {"": [en for en, _ in text["test"]]}))
    write_lines(data / "test-full/newstest2014-deen-ref.de.sgm",
                sgm("refset", {"ref": [de for _, de in text["test"]]}))
    return data, text


def test_wmt14_recipe_two_systems_and_significance(wmt_data, tmp_path):
    data, text = wmt_data
    env = {"DATA": str(data), "PARSER": "spacy", "EVAL_SETS": "newstest2014"}
    # the baseline: fairseq's transformer, no trees needed; the last checkpoint
    log = recipe("wmt14_en_de", {**env, "ARCH": "transformer", "AVG": "1"}, tmp_path)
    assert "transformer reads no trees: nothing to parse" in log
    assert not (tmp_path / "trees-spacy").exists()
    assert re.search(r"newstest2014: sacreBLEU \(detokenized.*\): BLEU = [\d.]+", log)
    assert "newstest2014:   signature: nrefs:1|case:mixed|eff:no|tok:13a" in log
    assert re.search(r"newstest2014: tokenized compound-split BLEU .*BLEU = [\d.]+", log)
    assert "signature: nrefs:1|case:mixed|eff:no|tok:none" in log
    results = tmp_path / "results" / "bpe100" / "transformer.seed1"
    hyps = (results / "newstest2014.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == SIZES["test"]
    # the sgm reference was read in source order despite its reversed documents
    refs = (tmp_path / "raw" / "newstest2014.de").read_text(encoding="utf-8").splitlines()
    assert refs == [de for _, de in text["test"]]
    assert (tmp_path / "raw" / "train.en").read_text(encoding="utf-8").count("\n") == SIZES["train"]
    tokenized = (tmp_path / "tok" / "newstest2013.de").read_text(encoding="utf-8")
    assert "E @-@ Mail ." in tokenized  # Moses -a, punctuation split off

    # the structure-aware system: parse (spaCy), trees beside the data, compare
    log = recipe("wmt14_en_de", {**env, "ARCH": "transformer_struct",
                                 "COMPARE_TO": "transformer"}, tmp_path)
    assert "reusing the binarized data" in log
    assert "-> --task translation_struct" in log
    # the mean of the last two checkpoints is decoded
    assert re.search(r"averaged 2 checkpoints \(checkpoint_\d+_2\.pt, checkpoint_\d+_3\.pt\)", log)
    assert "newstest2014 (test; beam 4, lenpen 0.6) with checkpoint_avg2.pt" in log
    assert (tmp_path / "data-bin" / "bpe100" / "train.en-de.en.trees.bin").exists()
    assert (tmp_path / "data-bin" / "bpe100" / "test.en-de.en.trees.idx").exists()
    assert ("paired bootstrap resampling (sacrebleu --paired-bs), baseline transformer vs "
            "transformer_struct") in log
    assert "Baseline: transformer.seed1/newstest2014.hyp" in log
    assert "transformer_struct.seed1/newstest2014.hyp" in log and re.search(r"\(p = [\d.]+\)", log)

    # stanza's code path: without models it says which variable to set
    proc = run(["bash", REPO / "examples" / "wmt14_en_de" / "run.sh"],
               env={**TINY, **env, "WORK": str(tmp_path), "ARCH": "transformer_struct",
                    "PARSER": "stanza", "STANZA_DIR": str(tmp_path / "no-stanza"),
                    "FROM_STAGE": "5", "TO_STAGE": "5"}, check=False, timeout=120)
    assert proc.returncode != 0
    assert "no stanza models found" in proc.stderr
    assert "STANZA_DIR=<model directory>" in proc.stderr

    # a re-run finds the data done
    log = recipe("wmt14_en_de", {**env, "TO_STAGE": "4"}, tmp_path)
    for what in ("reusing " + str(tmp_path / "raw"), "reusing the tokenized text",
                 "reusing the subword pieces", "reusing the binarized data"):
        assert what in log


def test_wmt14_recipe_says_what_is_missing(tmp_path):
    proc = run(["bash", REPO / "examples" / "wmt14_en_de" / "run.sh"],
               env={**TINY, "WORK": str(tmp_path), "DATA": str(tmp_path / "nothing")},
               check=False, timeout=60)
    assert proc.returncode != 0
    assert "set DATA=<directory with the unpacked WMT14 files>" in proc.stderr
    assert "training/europarl-v7.de-en.en" in proc.stderr


# ---------------------------------------------------------------------------
# NIST Zh-En: Chinese made from the toy English, four references

def chinese(sentence: str) -> str:
    """Unsegmented 'Chinese': two CJK characters per English word."""
    words = re.findall(r"[\w-]+|[.,]", sentence.lower())
    out = []
    for w in words:
        if w in ".,":
            out.append("。" if w == "." else "，")
        else:
            h = sum(ord(c) * 31 ** i for i, c in enumerate(w))
            out.append(chr(0x4E00 + h % 5000) + chr(0x4E00 + (h // 5000) % 5000))
    return "".join(out)


def four_references(en: str):
    return [en, en.replace("the ", "a "), en.lower(), en.rstrip(".")]


@pytest.fixture(scope="module")
def nist_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("nist")
    text = toy_text(seed=7)
    write_lines(root / "ldc" / "train.zh", [chinese(en) for en, _ in text["train"]])
    write_lines(root / "ldc" / "train.en", [en for en, _ in text["train"]])
    sets = {"MT02": text["dev"], "MT03": text["test"], "MT04": text["dev"][::-1]}
    for name, pairs in sets.items():
        source = [chinese(en) for en, _ in pairs]
        refs = list(zip(*(four_references(en) for en, _ in pairs)))
        d = root / "nist" / name
        if name == "MT04":  # plain text layout
            write_lines(d / "src.zh", source)
            for k, ref in enumerate(refs):
                write_lines(d / ("ref%d.en" % k), ref)
        else:  # SGML: three references in ref.sgm, the fourth in ref3.sgm
            write_lines(d / "src.sgm", sgm("srcset", {"": source}))
            write_lines(d / "ref.sgm", sgm("refset", {"r%d" % k: list(refs[k]) for k in range(3)}))
            write_lines(d / "ref3.sgm", sgm("refset", {"r3": list(refs[3])}))
    return root, text


def test_nist_recipe_four_references(nist_data, tmp_path):
    root, text = nist_data
    log = recipe("nist_zh_en", {
        "TRAIN_PREFIX": str(root / "ldc" / "train"), "NIST_DIR": str(root / "nist"),
        "TEST_SETS": "mt03 mt04", "EVAL_SETS": "mt03 mt04",
        "SEGMENTER": "udpipe", "PARSER": "udpipe",
        "ARCH": "transformer_struct", "CLEAN_RATIO": "9", "AVG": "1"}, tmp_path)
    assert "segmenting zh (udpipe)" in log
    assert (tmp_path / "data-bin" / "bpe100" / "train.zh-en.zh.trees.bin").exists()
    # separate Chinese and English pieces
    assert (tmp_path / "bpe100" / "codes.zh").exists()
    assert (tmp_path / "bpe100" / "codes.en").exists()
    for name, n in (("mt03", SIZES["test"]), ("mt04", SIZES["dev"])):
        assert "%s: %d sentences, 4 reference(s)" % (name, n) in log
        assert "%s:   signature: nrefs:4|case:lc|eff:no|tok:13a" % name in log
    # the reference k of every set, in source order
    for k, ref in enumerate(["mt03.en", "mt03.en.ref1", "mt03.en.ref2", "mt03.en.ref3"]):
        lines = (tmp_path / "raw" / ref).read_text(encoding="utf-8").splitlines()
        assert lines == [four_references(en)[k] for en, _ in text["test"]]
    summary = (tmp_path / "results" / "bpe100" / "transformer_struct.seed1" / "summary.txt").read_text()
    rows = {line.split()[0]: float(line.split()[1]) for line in summary.splitlines()[1:]}
    assert set(rows) == {"mt03", "mt04", "average"}
    assert rows["average"] == pytest.approx((rows["mt03"] + rows["mt04"]) / 2, abs=0.006)


def test_nist_recipe_says_what_is_missing(tmp_path):
    proc = run(["bash", REPO / "examples" / "nist_zh_en" / "run.sh"],
               env={**TINY, "WORK": str(tmp_path), "NIST_DIR": str(tmp_path)},
               check=False, timeout=60)
    assert proc.returncode != 0
    assert "set TRAIN_PREFIX=<prefix of the LDC training corpus>" in proc.stderr


# ---------------------------------------------------------------------------
# Multi30k: Hao et al.'s hybrid encoder, sentencepiece instead of BPE

def multi30k_files(data: Path, seed: int) -> Path:
    """Toy pairs as the raw Multi30k task 1 files."""
    text = toy_text(seed=seed)
    for split, name in (("train", "train"), ("dev", "val"), ("test", "test_2016_flickr")):
        write_lines(data / (name + ".en"), [en for en, _ in text[split]])
        write_lines(data / (name + ".de"), [de for _, de in text[split]])
    return data


@pytest.fixture(scope="module")
def multi30k_prepared(tmp_path_factory):
    """The toy Multi30k files and a WORK where the recipe has done stages 1-4
    (raw text cut to TRAIN_SIZE=40 training pairs, tokenized, BPE, binarized):
    the Multi30k tests go on from a copy of it."""
    root = tmp_path_factory.mktemp("multi30k")
    data = multi30k_files(root / "data", seed=5)
    recipe("multi30k_en_de", {"DATA": str(data), "TRAIN_SIZE": "40", "TO_STAGE": "4"}, root / "work")
    return data, root / "work"


def prepared_work(multi30k_prepared, tmp_path) -> Path:
    """A copy of the prepared Multi30k WORK under ``tmp_path``."""
    work = tmp_path / "work"
    shutil.copytree(multi30k_prepared[1], work, symlinks=True)
    return work


def test_multi30k_recipe_hybrid_sentencepiece(multi30k_prepared, tmp_path):
    data, work = multi30k_prepared[0], prepared_work(multi30k_prepared, tmp_path)
    log = recipe("multi30k_en_de", {
        "DATA": str(data), "SUBWORD": "spm", "ARCH": "onlstm_san_transformer", "TRAIN_SIZE": "40",
        "MODEL_ARGS": TINY["MODEL_ARGS"] + " --encoder-recurrent-layers 1",
        "EVAL_SETS": "test_2016_flickr", "AVG": "1"}, work)
    assert "training sentencepiece (120 pieces)" in log
    assert "onlstm_san_transformer reads no trees" in log
    assert (work / "raw" / "train.en").read_text(encoding="utf-8").count("\n") == 40
    pieces = (work / "spm120" / "test_2016_flickr.de").read_text(encoding="utf-8")
    assert "\u2581" in pieces
    assert re.search(r"test_2016_flickr: sacreBLEU \(detokenized.*\): BLEU = [\d.]+", log)


# ---------------------------------------------------------------------------
# Multi30k: seeds, recorded settings, control trees, exported results

def test_multi30k_recipe_seeds_settings_and_control_trees(multi30k_prepared, tmp_path):
    data, work = multi30k_prepared[0], prepared_work(multi30k_prepared, tmp_path)
    export = tmp_path / "export"
    env = {"DATA": str(data), "PARSER": "spacy", "ARCH": "transformer_struct", "SEED": "2",
           "EXPORT_DIR": str(export)}
    recipe("multi30k_en_de", env, work)
    run_dir = work / "checkpoints" / "bpe100" / "transformer_struct.seed2"
    settings = (run_dir / "settings.txt").read_text()
    assert "seed=2\n" in settings and "--seed 2 " in settings and "started=" in settings
    assert re.search(r"^commit=([0-9a-f]{40}(\+modified)?|unknown)$", settings, re.M)
    # the exported record: one hypothesis per reference line, and the log's summary
    for set_name in ("val", "test_2016_flickr"):
        hyps = (export / f"transformer_struct.seed2.{set_name}.hyp").read_text().splitlines()
        refs = (data / f"{set_name}.de").read_text().splitlines()
        assert len(hyps) == len(refs)
    summary = json.loads((export / "transformer_struct.seed2.train.json").read_text())
    assert summary["updates"] == 3 and summary["settings"]["seed"] == "2"
    assert summary["parameters"] > 0 and summary["wall_seconds"] >= 0
    assert [v["updates"] for v in summary["validations"]] == [1, 2, 3]
    # beside the checkpoints: what translating raw text as the test set was translated needs
    assert json.loads((run_dir / "raw_input.json").read_text()) == {
        "source_lang": "en", "target_lang": "de", "tokenizer": "moses_normalized",
        "moses_no_dash_splits": False, "bpe": "subword_nmt", "bpe_codes": "bpecodes",
        "parser": "spacy", "parser_model": "en_core_web_sm"}
    assert (run_dir / "bpecodes").read_text() == (work / "bpe100" / "codes.joint").read_text()
    translates_as_the_test_set(
        run_dir, "checkpoint_avg2.pt", "translation_struct",
        (data / "test_2016_flickr.en").read_text().splitlines(),
        (export / "transformer_struct.seed2.test_2016_flickr.hyp").read_text().splitlines(),
        beam=4, lenpen=0.6)

    # the same settings again: nothing is retrained
    log = recipe("multi30k_en_de", {**env, "FROM_STAGE": "6", "TO_STAGE": "6"}, work)
    assert "trained with the same settings" in log
    # other settings in the same directory are refused, naming it
    proc = run(["bash", REPO / "examples" / "multi30k_en_de" / "run.sh"],
               env={**TINY, **env, "WORK": str(work), "MAX_UPDATE": "4", "FROM_STAGE": "6"},
               check=False, timeout=120)
    assert proc.returncode != 0
    assert f"{run_dir} already holds a run with other settings" in proc.stderr
    assert "--max-update 3" in proc.stderr and "--max-update 4" in proc.stderr
    # ARCH_ARGS win over MODEL_ARGS, and name the run
    recipe("multi30k_en_de", {**env, "ARCH": "transformer", "ARCH_ARGS": "--encoder-layers 2",
                              "FROM_STAGE": "6", "TO_STAGE": "6"}, work)
    deep = work / "checkpoints" / "bpe100" / "transformer_encoder_layers_2.seed2"
    assert "encoder_layers=2" in (deep / "train.log").read_text()

    # control trees: their own data directory and run, over the same parses
    log = recipe("multi30k_en_de", {**env, "CONTROL_TREES": "random-projective",
                                    "FROM_STAGE": "5", "TO_STAGE": "7"}, work)
    control = work / "data-bin" / "bpe100.random-projective-trees"
    assert "random-projective control trees (seed 1) over the spacy parses" in (control / ".trees").read_text()
    assert (control / "train.en-de.en.bin").is_symlink()
    assert (control / "train.en-de.en.trees.bin").read_bytes() != \
        (work / "data-bin" / "bpe100" / "train.en-de.en.trees.bin").read_bytes()
    assert (export / "transformer_struct_random_projective_trees.seed2.test_2016_flickr.hyp").exists()
    proc = run(["bash", REPO / "examples" / "multi30k_en_de" / "run.sh"],
               env={**TINY, **env, "WORK": str(work), "ARCH": "transformer",
                    "CONTROL_TREES": "left-neighbour", "FROM_STAGE": "5"}, check=False, timeout=120)
    assert proc.returncode != 0 and "transformer reads no trees" in proc.stderr


@pytest.mark.parametrize("recipe_name, variable, source", [
    ("multi30k_en_de", "DATA", "github.com/multi30k/dataset"),
    ("pos_tagging", "UD", "universaldependencies.org"),
    ("logic_inference", "DATA", "github.com/sleepinyourhat/vector-entailment"),
])
def test_recipes_without_data_say_where_to_get_it(recipe_name, variable, source, tmp_path):
    proc = run(["bash", REPO / "examples" / recipe_name / "run.sh"],
               env={"WORK": str(tmp_path), "DATA": "", "UD": ""}, check=False, timeout=120)
    assert proc.returncode != 0
    assert f"set {variable}=" in proc.stderr and source in proc.stderr
    assert "shared" not in proc.stderr


# ---------------------------------------------------------------------------
# Logical inference: seeds of each model, the table of their means, exports

def test_logic_inference_recipe_two_seeds(tmp_path):
    from test_logic_inference import formula

    from fairseq_posattn.tasks.logic_inference import RELATIONS

    rng = random.Random(3)
    data, work, export = tmp_path / "logic", tmp_path / "work", tmp_path / "export"
    for prefix, lines in (("train", 24), ("test", 4)):
        for k in range(13):
            write_lines(data / f"{prefix}{k}", [
                f"{rng.choice(RELATIONS)}\t{formula(rng, k)}\t{formula(rng, rng.randint(0, k))}"
                for _ in range(lines)])
    proc = run(["bash", REPO / "examples" / "logic_inference" / "run.sh"],
               env={"DATA": str(data), "WORK": str(work), "EXPORT_DIR": str(export),
                    "ARCHS": "logic_san logic_onlstm_san", "SEEDS": "1 2", "DIM": "16",
                    "MAX_UPDATE": "3", "BATCH": "16", "THREADS": "1"}, timeout=600)
    log = proc.stdout + proc.stderr
    assert re.search(r"logic_onlstm_san\.seed2: 3 updates in \d+ s", log)
    table = (export / "table.md").read_text()
    assert table.splitlines()[0] == "| operators | examples | SAN | ON-LSTM+SAN |"
    assert re.search(r"^\| 7-12 \(unseen\) \| 24 \| [\d.]+ \([\d.]+ / [\d.]+\) \|", table, re.M)
    counts = json.loads((export / "counts.json").read_text())
    assert [len(runs) for runs in counts["models"].values()] == [2, 2]
    summary = json.loads((export / "logic_san.seed2.train.json").read_text())
    assert summary["updates"] == 3 and "accuracy" in summary["validations"][-1]
    assert summary["settings"]["seed"] == "2" and "--max-update 3" in summary["settings"]["command"]
    assert (export / "figure.png").read_bytes()[:4] == b"\x89PNG"
    # every run's own counts, exported as soon as it was evaluated
    run_counts = json.loads((export / "logic_onlstm_san.seed1.counts.json").read_text())
    assert list(run_counts["models"]) == ["ON-LSTM+SAN"] and len(run_counts["models"]["ON-LSTM+SAN"]) == 1

    # the table again from the runs' counts alone (nothing trained or evaluated)
    again = run(["bash", REPO / "examples" / "logic_inference" / "run.sh"],
                env={"DATA": str(data), "WORK": str(work), "ARCHS": "logic_san logic_onlstm_san",
                     "SEEDS": "1 2", "TRAIN": "0", "THREADS": "1"}, timeout=600)
    assert "evaluating" not in again.stderr and again.stdout == table
    # other settings in a run's directory are refused, naming it
    proc = run(["bash", REPO / "examples" / "logic_inference" / "run.sh"],
               env={"DATA": str(data), "WORK": str(work), "ARCHS": "logic_san", "SEEDS": "1",
                    "DIM": "16", "MAX_UPDATE": "4", "BATCH": "16", "THREADS": "1"},
               check=False, timeout=600)
    assert proc.returncode != 0
    assert f"{work / 'checkpoints' / 'logic_san.seed1'} already holds a run with other settings" in proc.stderr
    assert "--max-update 3" in proc.stderr and "--max-update 4" in proc.stderr


# ---------------------------------------------------------------------------
# PoS tagging: variants x seeds, the table, exports, settings

def test_pos_tagging_recipe(tmp_path):
    from test_pos_tagging import toy_treebank

    ud, work, export = tmp_path / "ud", tmp_path / "work", tmp_path / "export"
    toy_treebank(ud / "UD_Toy-Tiny")
    env = {"UD": str(ud), "WORK": str(work), "EXPORT_DIR": str(export), "TREEBANKS": "UD_Toy-Tiny",
           "VARIANTS": "san pe_con", "SEEDS": "1 2", "MAX_EPOCH": "2", "JOBS": "2",
           "EXTRA": "--encoder-layers 1 --char-embed-dim 8"}
    proc = run(["bash", REPO / "examples" / "pos_tagging" / "run.sh"], env=env, timeout=600)
    assert re.search(r"^\| SAN \| 2 \| [\d.]+ ± [\d.]+ \|", proc.stdout, re.M)
    assert re.search(r"^\| SAN\+PE\[con\] \| 2 \|", proc.stdout, re.M)
    assert (work / "UD_Toy-Tiny" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    for variant in ("san", "pe_con"):
        for seed in (1, 2):
            run_dir = export / "UD_Toy-Tiny" / variant / f"seed{seed}"
            summary = json.loads((run_dir / "train.json").read_text())
            assert summary["settings"]["seed"] == str(seed) and summary["epochs"] == 2
            assert f"posattn_tagger_{variant}" in summary["settings"]["command"]
            assert "accuracy" in summary["validations"][-1]
            assert json.loads((run_dir / "test.json").read_text())["words"] > 0
    # the table from the exported files alone is the recipe's
    table = run_cli_in_process("fairseq-posattn-pos-table", export)
    assert table.strip() and table.strip() in proc.stdout

    # a finished run is not trained again; other settings in its directory are refused
    again = run(["bash", REPO / "examples" / "pos_tagging" / "run.sh"], env=env, timeout=600)
    assert "seed 1:" not in again.stderr and table.strip() in again.stdout
    (work / "UD_Toy-Tiny" / "san" / "seed1" / "test.json").unlink()
    proc = run(["bash", REPO / "examples" / "pos_tagging" / "run.sh"],
               env={**env, "MAX_EPOCH": "3", "VARIANTS": "san", "SEEDS": "1"}, check=False, timeout=600)
    assert proc.returncode != 0
    assert f"{work / 'UD_Toy-Tiny' / 'san' / 'seed1'} already holds a run with other settings" in proc.stderr


def test_ablation_checks_the_parameter_matched_row_and_names_the_budget_rows(multi30k_prepared, tmp_path):
    """H is trained only when its parameter count is within 2% of E's (at the
    recipe's model size it is); X2 is row X at 2000 updates, under a name of its own."""
    data, work = multi30k_prepared[0], prepared_work(multi30k_prepared, tmp_path)
    ablation = REPO / "examples" / "multi30k_en_de" / "ablation.sh"
    env = {"DATA": str(data), "WORK": str(work), "EXPORT_DIR": str(tmp_path / "export"),
           "BPE_MERGES": "100", "WORKERS": "1"}
    proc = run(["bash", ablation, "--check", "H:1", "C2:1", "G:1", "PW:1", "QW2:1"], env=env,
               timeout=300)
    match = re.search(r"parameters: (\d+) for transformer .*--encoder-ffn-embed-dim 1920, "
                      r"(\d+) for onlstm_san_transformer \(within 0.02\)", proc.stderr)
    assert match and abs(int(match[1]) / int(match[2]) - 1) <= 0.02
    assert "run transformer_struct_max_update_2000.seed1" in proc.stderr
    assert "run onlstm_san_transformer_encoder_recurrent_cell_lstm.seed1" in proc.stderr
    assert "run transformer_pascal_random_projective_trees.seed1" in proc.stderr
    assert "run transformer_depdist_random_projective_trees_max_update_2000.seed1" in proc.stderr
    assert not (work / "checkpoints").exists()

    # at another model size the widened FFN no longer matches: refused before anything trains
    small = {**env, "MODEL_ARGS": TINY["MODEL_ARGS"]}
    proc = run(["bash", ablation, "A:1", "H:1"], env=small, check=False, timeout=300)
    assert proc.returncode != 0
    refused = re.search(r"the model has (\d+) parameters but PARAMS_LIKE='onlstm_san_transformer' "
                        r"has (\d+): more than 0.02 apart", proc.stderr)
    assert refused and abs(int(refused[1]) / int(refused[2]) - 1) > 0.02
    assert not (work / "checkpoints").exists()


@pytest.mark.parametrize("jobs, message", [(["A:1", "Z:1"], "unknown row 'Z' in job 'Z:1' (rows: A B C D E F G H W R L T P Q PW QW, and X2"),
                                           (["A1"], "job 'A1' is not ROW:SEED"),
                                           (["B2:1", "Z2:1"], "unknown row 'Z2' in job 'Z2:1'"),
                                           (["PW:1", "AW:1"], "unknown row 'AW' in job 'AW:1'"),
                                           (["F:2", "A:x"], "job 'A:x' is not ROW:SEED")])
def test_ablation_refuses_unknown_jobs_before_running_anything(jobs, message, tmp_path):
    proc = run(["bash", REPO / "examples" / "multi30k_en_de" / "ablation.sh", *jobs],
               env={"WORK": str(tmp_path), "DATA": ""}, check=False, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr
    assert list(tmp_path.iterdir()) == []
