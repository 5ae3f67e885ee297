"""BLEU of ``fairseq-generate`` output, the two ways the recipes report it
(docs/recipes.md): ``score`` detokenizes the hypotheses and writes them one
per line, then gives sacreBLEU against the raw references and, with
``--compound-split``, the tokenized compound-split BLEU of tensor2tensor's
``get_ende_bleu.sh``; ``summary`` tabulates the scored sets and their mean
(as Wang et al. 2019 average NIST MT03-06).
"""

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence

from sacrebleu.metrics import BLEU

from ..errors import UserError
from ..files import atomic_output, read_lines
from .corpus import detokenize

_COMPOUND = re.compile(r"(\S)-(\S)")


class ScoringError(UserError, ValueError):
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


def bleu_score(bleu: BLEU, hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> Dict[str, object]:
    score = bleu.corpus_score(list(hyps), [list(r) for r in refs])
    return {"score": score.score, "text": str(score), "signature": str(bleu.get_signature())}


def compound_split_score(hyps: Sequence[str], refs: Sequence[Sequence[str]],
                         lang: str) -> Dict[str, object]:
    """Case-sensitive BLEU over Moses tokens with compounds split (``get_ende_bleu.sh``:
    ``tokenizer.perl -l LANG``, without normalization)."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)

    def prepare(lines):
        return [split_compounds(tokenizer.tokenize(line, escape=False, return_str=True))
                for line in lines]

    return bleu_score(BLEU(tokenize="none"), prepare(hyps), [prepare(r) for r in refs])


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
              "sacrebleu": bleu_score(BLEU(lowercase=lowercase), hyps, refs)}
    if compound_split:
        result["compound_split"] = compound_split_score(hyps, refs, lang)
    return result


def summary(results: Sequence[Dict[str, object]], names: Sequence[str]) -> str:
    """A table of the sets' scores and their means."""
    columns = [("sacreBLEU", "sacrebleu"), ("tok. compound-split BLEU", "compound_split")]
    columns = [c for c in columns if all(c[1] in r for r in results)]
    table = [(name, [r[key]["score"] for _, key in columns]) for name, r in zip(names, results)]
    if len(results) > 1:
        table.append(("average", [sum(c) / len(c) for c in zip(*(row for _, row in table))]))
    width = max([len(n) for n in names] + [7])
    lines = [f"{'set':<{width}}  " + "  ".join(title for title, _ in columns)]
    for name, row in table:
        lines.append(f"{name:<{width}}  "
                     + "  ".join(f"{v:{len(title)}.2f}" for v, (title, _) in zip(row, columns)))
    return "\n".join(lines)


def cmd_score(args) -> None:
    result = score_set(args.generate_output, args.references, args.lang, args.hypotheses_out,
                       args.lowercase, args.compound_split)
    result["name"] = args.name
    print("%s: %d sentences, %d reference(s)" % (args.name, result["sentences"],
                                                 len(args.references)))
    for key, what in (("sacrebleu", "sacreBLEU (detokenized, against the raw references)"),
                      ("compound_split", "tokenized compound-split BLEU (papers' style, "
                                         "get_ende_bleu.sh)")):
        if key in result:
            print(f"{args.name}: {what}: {result[key]['text']}")
            print(f"{args.name}:   signature: {result[key]['signature']}")
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
