"""Text preparation for the recipes: raw parallel text to the tokenized words
that are parsed, split into subwords and binarized.

``fairseq-posattn-corpus COMMAND --help`` lists the commands.  Moses
tokenization does no XML escaping and sentencepiece no normalization, so that
the tokens and pieces spell the words the parser sees.  Every output is written
to a temporary file and renamed when complete.
"""

import argparse
import itertools
import os
import re
import sys
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..data.raw_text import MosesText, spaces_for_separators
from ..data.workers import worker_pool
from ..errors import UserError
from ..files import atomic_output, stream_lines

CHUNK_LINES = 2000


class CorpusError(UserError, ValueError):
    """Bad input; the message names the file and what to do."""


def text_lines(path: str) -> Iterator[str]:
    """The lines of ``path`` to tokenize, segment or split into subwords, each
    whitespace character but the space read as a space
    (:func:`~fairseq_posattn.data.raw_text.spaces_for_separators`; the lines
    that held one are counted on stderr)."""
    held, names = [], {}
    for n, line in enumerate(stream_lines(path), 1):
        line, found = spaces_for_separators(line)
        if found:
            held.append(n)
            names.update(dict.fromkeys(found))
        yield line
    if held:
        print("%s: %d line(s) held %s (lines %s%s): read as spaces between words"
              % (path, len(held), ", ".join(names), ", ".join(map(str, held[:10])),
                 ", ..." if len(held) > 10 else ""), file=sys.stderr)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    it = iter(items)
    return iter(lambda: list(itertools.islice(it, size)), [])


# ---------------------------------------------------------------------------
# Moses tokenization

_moses = None


def _init_moses(lang: str, aggressive_dashes: bool) -> None:
    global _moses
    _moses = MosesText(lang, aggressive_dashes)


def _tokenize_chunk(lines: Sequence[str]) -> List[str]:
    return [_moses(line) for line in lines]


def tokenize_lines(lines: Iterable[str], lang: str, aggressive_dashes: bool = False,
                   workers: int = 1) -> Iterator[str]:
    """Normalized, Moses-tokenized lines (tokens separated by one space)."""
    if workers <= 1:
        _init_moses(lang, aggressive_dashes)
        for block in chunks(lines, CHUNK_LINES):
            yield from _tokenize_chunk(block)
        return
    with worker_pool(workers, _init_moses, (lang, aggressive_dashes)) as each:
        for block in each(_tokenize_chunk, chunks(lines, CHUNK_LINES)):
            yield from block


# ---------------------------------------------------------------------------
# Chinese word segmentation

class StanzaSegmenter:
    """stanza's tokenizer, one input line = one output line."""

    def __init__(self, lang: str, model_dir: str, download: bool = False):
        import stanza
        from stanza.pipeline.core import DownloadMethod

        from fairseq_posattn.data.parsers import stanza_download_command

        if not download and not os.path.isfile(os.path.join(model_dir, "resources.json")):
            raise CorpusError(
                "no stanza models in %s (no resources.json). Download them where there is "
                "internet access with\n    %s\nand set STANZA_DIR to that directory, or use "
                "SEGMENTER=udpipe (offline)"
                % (model_dir, stanza_download_command(lang, model_dir)))
        self.pipeline = stanza.Pipeline(
            lang=lang, dir=model_dir, processors="tokenize", tokenize_no_ssplit=True,
            logging_level="WARN",
            download_method=DownloadMethod.REUSE_RESOURCES if download else DownloadMethod.NONE)

    def segment(self, lines: Sequence[str]) -> List[str]:
        import stanza

        docs = self.pipeline.bulk_process([stanza.Document([], text=line) for line in lines])
        return [" ".join(t.text for s in doc.sentences for t in s.tokens) for doc in docs]


class UDPipeSegmenter:
    """UDPipe's tokenizer; every sentence it finds in a line stays on that line."""

    def __init__(self, lang: str, model: str = None):
        from ufal import udpipe

        from fairseq_posattn.data.parsers import resolve_udpipe_model

        path = resolve_udpipe_model(model, lang)
        self.udpipe = udpipe
        self.model = udpipe.Model.load(path)
        if self.model is None:
            raise CorpusError("UDPipe cannot load model file %s" % path)

    def segment_line(self, line: str) -> str:
        udpipe = self.udpipe
        tokenizer = self.model.newTokenizer(udpipe.Model.DEFAULT)
        tokenizer.setText(line)
        sentence, error, tokens = udpipe.Sentence(), udpipe.ProcessingError(), []
        while tokenizer.nextSentence(sentence, error):
            # a multiword token is one surface token over several words (word 0 is the root)
            multiword = {m.idFirst: m for m in sentence.multiwordTokens}
            inside = {i for m in multiword.values() for i in range(m.idFirst + 1, m.idLast + 1)}
            tokens += [multiword[i].form if i in multiword else word.form
                       for i, word in enumerate(sentence.words) if 0 < i and i not in inside]
            sentence = udpipe.Sentence()
        if error.occurred():
            raise CorpusError("UDPipe tokenizer failed: %s" % error.message)
        return " ".join(tokens)

    def segment(self, lines: Sequence[str]) -> List[str]:
        return [self.segment_line(line) if line.strip() else "" for line in lines]


def build_segmenter(name: str, lang: str, stanza_dir: str = None, model: str = None,
                    download: bool = False):
    if name == "stanza":
        if stanza_dir is None:
            from stanza.resources.common import DEFAULT_MODEL_DIR
            stanza_dir = DEFAULT_MODEL_DIR
        return StanzaSegmenter(lang, os.path.abspath(stanza_dir), download)
    if name == "udpipe":
        from fairseq_posattn.data.parsers import ParserSetupError

        try:
            return UDPipeSegmenter(lang, model)
        except ParserSetupError as exc:
            raise CorpusError(str(exc)) from None
    raise CorpusError("unknown segmenter %r (stanza or udpipe)" % name)


# ---------------------------------------------------------------------------
# cleaning

def keep_pair(src_tokens: int, tgt_tokens: int, min_len: int, max_len: int,
              ratio: float) -> bool:
    """clean-corpus-n's test of one sentence pair (token counts)."""
    lengths = (src_tokens, tgt_tokens)
    return (all(0 < n and min_len <= n <= max_len for n in lengths)
            and max(lengths) / min(lengths) <= ratio)


def clean_corpus(src_in: str, tgt_in: str, src_out: str, tgt_out: str, min_len: int,
                 max_len: int, ratio: float) -> Tuple[int, int]:
    """Copy the pairs that :func:`keep_pair` keeps (whitespace normalized);
    return (kept, total)."""
    kept = total = 0
    with open(src_in, encoding="utf-8") as fs, open(tgt_in, encoding="utf-8") as ft, \
            atomic_output(src_out) as out_s, atomic_output(tgt_out) as out_t:
        for total, (s, t) in enumerate(itertools.zip_longest(fs, ft), 1):
            if s is None or t is None:
                raise CorpusError("%s and %s have different numbers of lines (one ends at "
                                  "line %d); they must be sentence-aligned"
                                  % (src_in, tgt_in, total))
            s_tok, t_tok = s.split(), t.split()
            if keep_pair(len(s_tok), len(t_tok), min_len, max_len, ratio):
                out_s.write(" ".join(s_tok) + "\n")
                out_t.write(" ".join(t_tok) + "\n")
                kept += 1
    return kept, total


# ---------------------------------------------------------------------------
# SGML test sets

_DOC = re.compile(r"<doc\b([^>]*)>(.*?)</doc\s*>", re.S | re.I)
_SEG = re.compile(r"<seg\b([^>]*)>(.*?)</seg\s*>", re.S | re.I)
_ATTR = re.compile(r"""([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""")

SegKey = Tuple[str, str]


def _attributes(text: str) -> Dict[str, str]:
    return {m.group(1).lower(): next(g for g in m.groups()[1:] if g is not None)
            for m in _ATTR.finditer(text)}


def read_sgm(path: str, by_sysid: bool = True) -> Dict[str, Dict[SegKey, str]]:
    """The segments of an SGML file keyed by (docid, seg id), grouped by
    ``sysid`` (in the order of first appearance; one group without
    ``by_sysid``).  Text is kept as written, whitespace collapsed (as
    sacrebleu reads SGML)."""
    try:
        with open(path, encoding="utf-8") as f:
            content = f.read()
    except UnicodeDecodeError as exc:
        raise CorpusError("%s is not UTF-8 (%s); convert it first, e.g. iconv -f GB18030 "
                          "-t UTF-8 for older NIST sets" % (path, exc)) from None
    systems: Dict[str, Dict[SegKey, str]] = {}
    docs = list(_DOC.finditer(content))
    if not docs:
        raise CorpusError("%s: no <doc ...>...</doc> element; is it an SGML test set?" % path)
    for doc in docs:
        attrs = _attributes(doc.group(1))
        line = content.count("\n", 0, doc.start()) + 1
        if "docid" not in attrs:
            raise CorpusError("%s, line %d: <doc> without a docid attribute" % (path, line))
        segments = systems.setdefault(attrs.get("sysid", "") if by_sysid else "", {})
        for seg in _SEG.finditer(doc.group(2)):
            seg_id = _attributes(seg.group(1)).get("id")
            key = (attrs["docid"], seg_id)
            if seg_id is None or key in segments:
                raise CorpusError("%s, document %s (line %d): a <seg> without an id or with "
                                  "an id used twice (%s)" % (path, attrs["docid"], line, seg_id))
            segments[key] = " ".join(seg.group(2).split())
    return systems


def sgm_test_set(source: str, references: Sequence[str]) -> Tuple[List[str], List[List[str]]]:
    """(source segments, one list per reference) in the source's order."""
    (src_segments,) = read_sgm(source, by_sysid=False).values()
    refs = []
    for path in references:
        for sysid, segments in read_sgm(path).items():
            missing = [k for k in src_segments if k not in segments]
            if missing or len(segments) != len(src_segments):
                raise CorpusError(
                    "%s (sysid %r) has %d segments for the %d of %s; missing e.g. %s"
                    % (path, sysid, len(segments), len(src_segments), source,
                       "document %s segment %s" % missing[0] if missing else "none (extra ones)"))
            refs.append([segments[k] for k in src_segments])
    return list(src_segments.values()), refs


# ---------------------------------------------------------------------------
# sentencepiece

def spm_train(inputs: Sequence[str], model_prefix: str, vocab_size: int, model_type: str,
              character_coverage: float, input_sentence_size: int) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(inputs), model_prefix=model_prefix, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage,
        # pieces must spell the tokens that were parsed: no normalization
        normalization_rule_name="identity",
        input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
        hard_vocab_limit=False, minloglevel=1)


def spm_encode(model: str, lines: Iterable[str], workers: int = 1) -> Iterator[str]:
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=model)
    for block in chunks(lines, CHUNK_LINES * 10):
        for pieces in processor.encode(block, out_type=str, num_threads=workers):
            yield " ".join(pieces)


# ---------------------------------------------------------------------------
# command line

def _progress(lines: Iterable[str], desc: str) -> Iterable[str]:
    from tqdm import tqdm

    return tqdm(lines, desc=desc, unit=" lines", disable=None, mininterval=5)


def _write_lines(path: str, lines: Iterable[str]) -> int:
    n = 0
    with atomic_output(path) as out:
        for n, line in enumerate(lines, 1):
            out.write(line + "\n")
    return n


def _each_file(args, done: Optional[str], convert) -> None:
    """Write ``convert(path)`` of each --input to its --output; ``done % lines``
    (if given) says what was done, on stderr."""
    if len(args.input) != len(args.output):
        raise CorpusError(f"{len(args.input)} --input files but {len(args.output)} --output files")
    for src, dst in zip(args.input, args.output):
        n = _write_lines(dst, convert(src))
        if done:
            print(f"{done % n}: {src} -> {dst}", file=sys.stderr)


def cmd_tokenize(args) -> None:
    _each_file(args, "tokenized %d lines", lambda src: tokenize_lines(
        _progress(text_lines(src), "tokenize " + src), args.lang, args.aggressive_dashes,
        args.workers))


def detokenize(lines: Iterable[str], lang: str) -> List[str]:
    """Moses detokenization (sacremoses) of whitespace-tokenized lines."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split()) for line in lines]


def cmd_detokenize(args) -> None:
    _each_file(args, "detokenized %d lines", lambda src: detokenize(stream_lines(src), args.lang))


def cmd_segment(args) -> None:
    segmenter = build_segmenter(args.segmenter, args.lang, args.stanza_dir, args.model,
                                args.download)
    _each_file(args, f"segmented %d lines ({args.segmenter})", lambda src: (
        line for block in chunks(_progress(text_lines(src), "segment " + src), 256)
        for line in segmenter.segment(block)))


def cmd_clean(args) -> None:
    kept, total = clean_corpus(args.src_input, args.tgt_input, args.src_output,
                               args.tgt_output, args.min_len, args.max_len, args.ratio)
    print("clean: kept %d of %d sentence pairs (%d to %d tokens, length ratio <= %g)"
          % (kept, total, args.min_len, args.max_len, args.ratio), file=sys.stderr)


def cmd_sgm(args) -> None:
    source, refs = sgm_test_set(args.source, args.references)
    if len(refs) != len(args.out_references):
        raise CorpusError("%s hold %d references, but %d --out-references were given"
                          % (" ".join(args.references), len(refs), len(args.out_references)))
    _write_lines(args.out_source, source)
    for path, ref in zip(args.out_references, refs):
        _write_lines(path, ref)
    print("%s: %d segments, %d reference(s)" % (args.source, len(source), len(refs)),
          file=sys.stderr)


def cmd_spm_train(args) -> None:
    spm_train(args.input, args.model_prefix, args.vocab_size, args.model_type,
              args.character_coverage, args.input_sentence_size)


def cmd_spm_encode(args) -> None:
    _each_file(args, None, lambda src: spm_encode(args.model, text_lines(src), args.workers))


def cmd_model_dir(args) -> None:
    from ..data import model_dir

    settings = {"source_lang": args.source_lang, "target_lang": args.target_lang, "bpe": args.bpe,
                "bpe_codes" if args.bpe == "subword_nmt" else "sentencepiece_model": None}
    if args.tokenizer:
        settings.update(tokenizer=args.tokenizer, moses_no_dash_splits=not args.aggressive_dashes)
    if args.parser:
        settings.update({option: getattr(args, option) for option in
                         ("parser", "parser_model", "parser_lang", "stanza_dir")
                         if getattr(args, option) is not None})
    model_dir.write(args.dir, args.dictionaries, settings, args.subword_model)
    print("%s translates raw text: %s" % (args.dir, os.path.join(args.dir, model_dir.SETTINGS)),
          file=sys.stderr)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-posattn-corpus", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name, func, help, files=True):
        c = sub.add_parser(name, help=help, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        c.set_defaults(func=func)
        if files:
            c.add_argument("--input", nargs="+", required=True)
            c.add_argument("--output", nargs="+", required=True, help="one per --input")
        return c

    c = command("tokenize", cmd_tokenize, "Moses-style tokenization (sacremoses)")
    c.add_argument("--lang", required=True)
    c.add_argument("--aggressive-dashes", action="store_true", help="a-b -> a @-@ b")
    c.add_argument("--workers", type=int, default=1)

    c = command("detokenize", cmd_detokenize, "Moses-style detokenization (sacremoses)")
    c.add_argument("--lang", required=True)

    c = command("segment", cmd_segment, "Chinese word segmentation")
    c.add_argument("--segmenter", choices=("stanza", "udpipe"), default="stanza")
    c.add_argument("--lang", default="zh")
    c.add_argument("--stanza-dir", default=None, help="stanza models (default: stanza's)")
    c.add_argument("--download", action="store_true", help="stanza: download missing models")
    c.add_argument("--model", default=None, help="udpipe: model file (default: udchinese)")

    c = command("clean", cmd_clean, "drop pairs by length and length ratio", files=False)
    for name in ("src-input", "tgt-input", "src-output", "tgt-output"):
        c.add_argument("--" + name, required=True)
    c.add_argument("--min-len", type=int, default=1)
    c.add_argument("--max-len", type=int, default=250)
    c.add_argument("--ratio", type=float, default=1.5)

    c = command("sgm", cmd_sgm, "segments of an SGML test set", files=False)
    c.add_argument("--source", required=True)
    c.add_argument("--references", nargs="+", required=True)
    c.add_argument("--out-source", required=True)
    c.add_argument("--out-references", nargs="+", required=True)

    c = command("spm-train", cmd_spm_train, "train a sentencepiece model", files=False)
    c.add_argument("--input", nargs="+", required=True)
    c.add_argument("--model-prefix", required=True)
    c.add_argument("--vocab-size", type=int, default=32000)
    c.add_argument("--model-type", choices=("bpe", "unigram"), default="bpe")
    c.add_argument("--character-coverage", type=float, default=1.0)
    c.add_argument("--input-sentence-size", type=int, default=10000000)

    c = command("spm-encode", cmd_spm_encode, "split tokenized text into sentencepiece pieces")
    c.add_argument("--model", required=True)
    c.add_argument("--workers", type=int, default=1)

    c = command("model-dir", cmd_model_dir, "write beside a model's checkpoints what translating "
                "raw text with it needs (docs/recipes.md)", files=False)
    c.add_argument("--dir", required=True, help="the checkpoint directory")
    c.add_argument("--dictionaries", nargs="+", required=True, help="dict.SRC.txt, dict.TGT.txt")
    c.add_argument("--source-lang", required=True)
    c.add_argument("--target-lang", required=True)
    c.add_argument("--tokenizer", choices=("moses_normalized",), default=None,
                   help="the tokenize command's tokenization (default: none, the text is "
                        "read as it comes)")
    c.add_argument("--aggressive-dashes", action="store_true", help="as given to tokenize")
    c.add_argument("--bpe", choices=("subword_nmt", "sentencepiece"), required=True)
    c.add_argument("--subword-model", required=True,
                   help="the BPE codes (subword_nmt) or sentencepiece model of the source")
    c.add_argument("--parser", default=None, help="the parser of a model that reads trees")
    c.add_argument("--parser-model", default=None)
    c.add_argument("--parser-lang", default=None)
    c.add_argument("--stanza-dir", default=None)
    return p


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    try:
        args.func(args)
    except UnicodeDecodeError as exc:
        sys.exit("fairseq-posattn-corpus %s: error: an input file is not UTF-8 (%s): convert it first "
                 "(e.g. iconv -f GB18030 -t UTF-8)" % (args.command, exc))
    except (CorpusError, OSError) as exc:
        sys.exit("fairseq-posattn-corpus %s: error: %s" % (args.command, exc))


if __name__ == "__main__":
    main()
