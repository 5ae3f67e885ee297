"""BLEU of ``fairseq-generate`` output, the two ways the recipes report it.

``score``
    Reads the hypotheses (``H-`` lines, subword splitting already removed by
    ``--remove-bpe``), detokenizes them (sacremoses) and writes them one per
    line in corpus order, then scores them with sacrebleu against the raw
    references (one or several files):

    * **sacreBLEU**: detokenized hypotheses against the untouched references,
      sacrebleu's own tokenization; the signature says how (``nrefs``,
      ``case``, ``tok``, ...).  ``--lowercase`` gives case-insensitive BLEU.
    * **tokenized compound-split BLEU** (``--compound-split``): the BLEU that
      Transformer papers on WMT14 En-De report (tensor2tensor's
      ``get_ende_bleu.sh``): hypotheses and references Moses-tokenized, every
      ``X-Y`` (non-space around a hyphen) split into ``X ##AT##-##AT## Y``,
      then BLEU over those tokens (sacrebleu with ``tokenize='none'``).

    The scores go to ``--json-out`` for :func:`summary`.
``summary``
    One table over sets (and their mean, as Wang et al. 2019 average NIST
    MT03-06).
"""

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence

from sacrebleu.metrics import BLEU

from ..files import atomic_output
from .corpus import detokenize, moses_tokenize_references, read_lines

_COMPOUND = re.compile(r"(\S)-(\S)")


class ScoringError(ValueError):
    pass


def split_compounds(line: str) -> str:
    """``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``: left to right,
    matches do not overlap (``a-b-c`` -> ``a ##AT##-##AT## b-c``)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def read_hypotheses(path: str) -> List[str]:
    """The ``H-`` lines of a ``fairseq-generate`` output in sentence-id order;
    every id from 0 to the largest must be there exactly once."""
    by_id: Dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.startswith("H-"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3 or not fields[0][2:].isdigit():
                raise ScoringError("%s, line %d: expected 'H-<id>\\t<score>\\t<text>'"
                                   % (path, number))
            key = int(fields[0][2:])
            if key in by_id:
                raise ScoringError("%s, line %d: a second hypothesis for sentence %d (use "
                                   "--nbest 1)" % (path, number, key))
            by_id[key] = fields[2]
    missing = [i for i in range(len(by_id)) if i not in by_id]
    if missing or not by_id:
        raise ScoringError("%s: %s" % (path, "no H- lines (did fairseq-generate fail?)"
                                       if not by_id else "no hypothesis for sentences %s"
                                       % missing[:10]))
    return [by_id[i] for i in range(len(by_id))]


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[Sequence[str]],
                    lowercase: bool = False) -> Dict[str, object]:
    bleu = BLEU(lowercase=lowercase)
    score = bleu.corpus_score(list(hyps), [list(r) for r in refs])
    return {"score": score.score, "text": str(score), "signature": str(bleu.get_signature())}


def compound_split_score(hyps: Sequence[str], refs: Sequence[Sequence[str]],
                         lang: str) -> Dict[str, object]:
    """Tokenized, compound-split, case-sensitive BLEU (see the module doc)."""
    def prepare(lines):
        return [split_compounds(line) for line in moses_tokenize_references(lines, lang)]

    bleu = BLEU(tokenize="none")
    score = bleu.corpus_score(prepare(hyps), [prepare(r) for r in refs])
    return {"score": score.score, "text": str(score), "signature": str(bleu.get_signature())}


def score_set(generate_output: str, references: Sequence[str], lang: str,
              hypotheses_out: str, lowercase: bool = False,
              compound_split: bool = False) -> Dict[str, object]:
    refs = [read_lines(path) for path in references]
    hyps = detokenize(read_hypotheses(generate_output), lang)
    for path, ref in zip(references, refs):
        if len(ref) != len(hyps):
            raise ScoringError("%s has %d lines but %s has %d hypotheses: decode the set these "
                               "references belong to" % (path, len(ref), generate_output,
                                                         len(hyps)))
    with atomic_output(hypotheses_out) as out:
        out.writelines(h + "\n" for h in hyps)
    result = {"sentences": len(hyps), "references": list(references),
              "sacrebleu": sacrebleu_score(hyps, refs, lowercase)}
    if compound_split:
        result["compound_split"] = compound_split_score(hyps, refs, lang)
    return result


def summary(results: Sequence[Dict[str, object]], names: Sequence[str]) -> str:
    """A table of the sets' scores and their means."""
    columns = [("sacreBLEU", "sacrebleu"), ("tok. compound-split BLEU", "compound_split")]
    columns = [c for c in columns if all(c[1] in r for r in results)]
    width = max([len(n) for n in names] + [7])
    rows = ["%-*s  %s" % (width, "set", "  ".join(title for title, _ in columns))]
    for name, result in zip(names, results):
        rows.append("%-*s  %s" % (width, name, "  ".join(
            "%*.2f" % (len(title), result[key]["score"]) for title, key in columns)))
    if len(results) > 1:
        rows.append("%-*s  %s" % (width, "average", "  ".join(
            "%*.2f" % (len(title), sum(r[key]["score"] for r in results) / len(results))
            for title, key in columns)))
    return "\n".join(rows)


def cmd_score(args) -> None:
    result = score_set(args.generate_output, args.references, args.lang, args.hypotheses_out,
                       args.lowercase, args.compound_split)
    result["name"] = args.name
    print("%s: %d sentences, %d reference(s)" % (args.name, result["sentences"],
                                                 len(args.references)))
    print("%s: sacreBLEU (detokenized, against the raw references): %s"
          % (args.name, result["sacrebleu"]["text"]))
    print("%s:   signature: %s" % (args.name, result["sacrebleu"]["signature"]))
    if args.compound_split:
        print("%s: tokenized compound-split BLEU (papers' style, get_ende_bleu.sh): %s"
              % (args.name, result["compound_split"]["text"]))
        print("%s:   signature: %s" % (args.name, result["compound_split"]["signature"]))
    if args.json_out:
        with atomic_output(args.json_out) as out:
            json.dump(result, out, indent=1)


def cmd_summary(args) -> None:
    results = []
    for name in args.sets:
        path = os.path.join(args.results_dir, name + ".bleu.json")
        if not os.path.isfile(path):
            raise ScoringError("%s is missing: score set %s first" % (path, name))
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    print(summary(results, args.sets))


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-posattn-score", description="BLEU of fairseq-generate output")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("score", help="score one decoded set")
    c.set_defaults(func=cmd_score)
    c.add_argument("--generate-output", required=True, help="fairseq-generate stdout")
    c.add_argument("--references", nargs="+", required=True, help="raw reference file(s)")
    c.add_argument("--lang", required=True, help="target language (detokenizer)")
    c.add_argument("--hypotheses-out", required=True, help="detokenized hypotheses (written)")
    c.add_argument("--name", default="test", help="set name in the messages")
    c.add_argument("--json-out", default=None, help="scores as JSON (for summary)")
    c.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU")
    c.add_argument("--compound-split", action="store_true",
                   help="also the tokenized compound-split BLEU")
    c = sub.add_parser("summary", help="table of scored sets and their average")
    c.set_defaults(func=cmd_summary)
    c.add_argument("--results-dir", required=True)
    c.add_argument("--sets", nargs="+", required=True)
    return p


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = get_parser().parse_args(argv)
    try:
        args.func(args)
    except (ScoringError, OSError) as exc:
        sys.exit("fairseq-posattn-score %s: error: %s" % (args.command, exc))


if __name__ == "__main__":
    main()
