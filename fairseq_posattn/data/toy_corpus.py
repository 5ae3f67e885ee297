"""A small synthetic English -> "German-like" parallel corpus with dependency trees.

The corpus is made by the project itself (no external data) for the quickstart
and the end-to-end tests.  It is deterministic for a given seed.

How a sentence is made
----------------------
1. A small probabilistic grammar samples an *unordered* dependency tree: a main
   clause (subject, verb, optional object, adverb, prepositional phrase,
   perfect tense auxiliary), optionally a subordinate clause ("because",
   "when", ...) placed after or in front of the main clause, noun phrases with
   determiners, adjectives, a prepositional modifier or a relative clause
   (subject or object relative).  Verbs select their subjects and objects by
   semantic class (people and animals read, eat, see; food is eaten, ...).
2. English linearisation rules give the source sentence and its UD-style tree
   (heads 1-based, 0 = root; the main verb is the root, determiners and
   adjectives attach to nouns, a preposition attaches to its noun (``case``),
   the noun to the verb (``obl``) or to a noun (``nmod``), auxiliaries and
   subordinators attach to their verb, a subordinate clause's verb to the main
   verb (``advcl``), a relative clause's verb to its noun (``acl:relcl``)).
3. German-like linearisation rules over the *same tree* give the target:
   a bilingual lexicon, case from the dependency relation (``nsubj`` ->
   nominative, ``obj`` -> accusative, under a preposition -> dative) and
   gender from the head noun decide determiners, adjective endings and
   relative pronouns; word order depends on the tree: the finite verb is in
   second position in main clauses (so a fronted subordinate clause inverts
   subject and verb), participles go to the end of their clause, and the
   finite verb goes to the end of subordinate and relative clauses, which
   are set off by commas.

Examples (source / heads / target; ``generate_examples(8, seed=3)``)::

    if the bird eats a red apple , the happy child has read the letter .
    4 3 4 13 7 7 4 4 11 11 13 13 0 15 13 13
    falls der Vogel einen roten Apfel isst , hat das glueckliche Kind den Brief gelesen .

    the child that the cat sees has come .
    2 8 6 5 6 2 8 0 8
    das Kind , das die Katze sieht , ist gekommen .

The splits of one call are disjoint (no source sentence occurs twice).
"""

import argparse
import os
import random
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = [
    "ToyExample",
    "generate_examples",
    "generate_splits",
    "detokenize",
    "to_conllu",
    "write_split",
    "write_corpus",
    "cli_main",
]

# --------------------------------------------------------------------------
# Lexicon
# --------------------------------------------------------------------------

# english noun: (german noun, gender, semantic class)
_NOUNS: Dict[str, Tuple[str, str, str]] = {
    # people
    "man": ("Mann", "m", "person"),
    "woman": ("Frau", "f", "person"),
    "child": ("Kind", "n", "person"),
    "teacher": ("Lehrer", "m", "person"),
    "girl": ("Maedchen", "n", "person"),
    "friend": ("Freund", "m", "person"),
    "sister": ("Schwester", "f", "person"),
    "doctor": ("Arzt", "m", "person"),
    # animals
    "dog": ("Hund", "m", "animal"),
    "cat": ("Katze", "f", "animal"),
    "bird": ("Vogel", "m", "animal"),
    "horse": ("Pferd", "n", "animal"),
    "mouse": ("Maus", "f", "animal"),
    # things
    "ball": ("Ball", "m", "thing"),
    "car": ("Auto", "n", "thing"),
    "box": ("Kiste", "f", "thing"),
    "key": ("Schluessel", "m", "thing"),
    "cup": ("Tasse", "f", "thing"),
    "table": ("Tisch", "m", "thing"),
    # food
    "apple": ("Apfel", "m", "food"),
    "bread": ("Brot", "n", "food"),
    "cake": ("Kuchen", "m", "food"),
    "soup": ("Suppe", "f", "food"),
    # things to read
    "book": ("Buch", "n", "reading"),
    "letter": ("Brief", "m", "reading"),
    "newspaper": ("Zeitung", "f", "reading"),
    # places
    "house": ("Haus", "n", "place"),
    "garden": ("Garten", "m", "place"),
    "city": ("Stadt", "f", "place"),
    "park": ("Park", "m", "place"),
    "school": ("Schule", "f", "place"),
    "river": ("Fluss", "m", "place"),
}

_ANIMATE = ("person", "animal")
_ANY = ("person", "animal", "thing", "food", "reading", "place")


@dataclass(frozen=True)
class _Verb:
    lemma: str
    en_3sg: str
    en_part: str
    de_3sg: str
    de_part: str
    de_aux: str  # "hat" or "ist"
    subj_classes: Tuple[str, ...]
    obj_classes: Tuple[str, ...]  # empty: intransitive


_PERSON = ("person",)

_VERBS: Tuple[_Verb, ...] = (
    _Verb("see", "sees", "seen", "sieht", "gesehen", "hat", _ANIMATE, _ANY),
    _Verb("find", "finds", "found", "findet", "gefunden", "hat", _ANIMATE, _ANY),
    _Verb("like", "likes", "liked", "mag", "gemocht", "hat", _ANIMATE, _ANY),
    _Verb("carry", "carries", "carried", "traegt", "getragen", "hat", _PERSON,
          ("animal", "thing", "food", "reading")),
    _Verb("eat", "eats", "eaten", "isst", "gegessen", "hat", _ANIMATE, ("food",)),
    _Verb("read", "reads", "read", "liest", "gelesen", "hat", _PERSON, ("reading",)),
    _Verb("buy", "buys", "bought", "kauft", "gekauft", "hat", _PERSON,
          ("thing", "food", "reading")),
    _Verb("visit", "visits", "visited", "besucht", "besucht", "hat", _PERSON,
          ("person", "place")),
    _Verb("sleep", "sleeps", "slept", "schlaeft", "geschlafen", "hat", _ANIMATE, ()),
    _Verb("laugh", "laughs", "laughed", "lacht", "gelacht", "hat", _PERSON, ()),
    _Verb("sing", "sings", "sung", "singt", "gesungen", "hat", _ANIMATE, ()),
    _Verb("run", "runs", "run", "laeuft", "gelaufen", "ist", _ANIMATE, ()),
    _Verb("come", "comes", "come", "kommt", "gekommen", "ist", _ANIMATE, ()),
)

_THINGS = ("thing", "food", "reading", "place")
# english adjective: (german stem, noun classes it modifies)
_ADJECTIVES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "big": ("gross", ("animal", "thing", "place")),
    "small": ("klein", ("person", "animal", "thing", "place")),
    "old": ("alt", _ANY),
    "young": ("jung", _ANIMATE),
    "happy": ("gluecklich", _ANIMATE),
    "new": ("neu", _THINGS),
    "red": ("rot", ("thing", "food", "reading")),
    "black": ("schwarz", ("animal", "thing")),
}

_ADVERBS: Dict[str, str] = {
    "often": "oft",
    "today": "heute",
    "always": "immer",
    "again": "wieder",
}

# preposition: (german, classes of its noun); all take the dative here
_VERB_PREPS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "in": ("in", ("place",)),
    "near": ("neben", ("place", "thing")),
    "behind": ("hinter", ("place", "thing")),
    "with": ("mit", ("person", "animal")),
}
_NOUN_PREPS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "with": ("mit", ("thing", "animal")),
    "from": ("aus", ("place",)),
}

_SUBORDINATORS: Dict[str, str] = {
    "because": "weil",
    "when": "wenn",
    "although": "obwohl",
    "if": "falls",
}

_DEF = {"nom": {"m": "der", "f": "die", "n": "das"},
        "acc": {"m": "den", "f": "die", "n": "das"},
        "dat": {"m": "dem", "f": "der", "n": "dem"}}
_INDEF = {"nom": {"m": "ein", "f": "eine", "n": "ein"},
          "acc": {"m": "einen", "f": "eine", "n": "ein"},
          "dat": {"m": "einem", "f": "einer", "n": "einem"}}
# adjective endings after the definite (weak) and indefinite (mixed) article
_ADJ_END_DEF = {"nom": {"m": "e", "f": "e", "n": "e"},
                "acc": {"m": "en", "f": "e", "n": "e"},
                "dat": {"m": "en", "f": "en", "n": "en"}}
_ADJ_END_INDEF = {"nom": {"m": "er", "f": "e", "n": "es"},
                  "acc": {"m": "en", "f": "e", "n": "es"},
                  "dat": {"m": "en", "f": "en", "n": "en"}}
_REL_PRON = _DEF  # nominative/accusative relative pronouns = definite articles


def _nouns_of(classes: Sequence[str]) -> List[str]:
    return [en for en, (_, _, c) in _NOUNS.items() if c in classes]


# --------------------------------------------------------------------------
# Unordered dependency tree
# --------------------------------------------------------------------------


class _Node:
    """One source word; children are kept by relation, order is decided later."""

    __slots__ = ("form", "lemma", "upos", "deprel", "children", "head",
                 "de", "gender", "definite", "verb", "fronted", "index")

    def __init__(self, form, lemma, upos, deprel):
        self.form = form
        self.lemma = lemma
        self.upos = upos
        self.deprel = deprel
        self.children: List["_Node"] = []
        self.head: Optional["_Node"] = None
        self.de: Optional[str] = None  # lexical translation (nouns, adverbs, ...)
        self.gender: Optional[str] = None
        self.definite: Optional[bool] = None
        self.verb: Optional[_Verb] = None
        self.fronted = False
        self.index = 0  # 1-based position in the English sentence

    def add(self, child: "_Node") -> "_Node":
        child.head = self
        self.children.append(child)
        return child

    def child(self, *deprels) -> Optional["_Node"]:
        for c in self.children:
            if c.deprel in deprels:
                return c
        return None

    def all(self, *deprels) -> List["_Node"]:
        return [c for c in self.children if c.deprel in deprels]


class _Grammar:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def p(self, prob: float) -> bool:
        return self.rng.random() < prob

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    # noun phrases ---------------------------------------------------------

    def noun_phrase(self, classes, deprel, nested: bool, allow_rel: bool) -> _Node:
        en = self.choice(_nouns_of(classes))
        de, gender, sem = _NOUNS[en]
        noun = _Node(en, en, "NOUN", deprel)
        noun.de, noun.gender = de, gender
        noun.definite = self.p(0.7)
        det = "the" if noun.definite else "a"
        noun.add(_Node(det, det, "DET", "det"))
        if self.p(0.35):
            adjs = [a for a, (_, cls) in _ADJECTIVES.items() if sem in cls]
            first = self.choice(adjs)
            noun.add(self._adj(first))
            if self.p(0.15):
                second = self.choice([a for a in adjs if a != first])
                noun.add(self._adj(second))
        if not nested:
            if self.p(0.12):
                prep = self.choice(list(_NOUN_PREPS))
                pde, pcls = _NOUN_PREPS[prep]
                pobj = self.noun_phrase(pcls, "nmod", nested=True, allow_rel=False)
                pobj.add(_Node(prep, prep, "ADP", "case")).de = pde
                noun.add(pobj)
            elif allow_rel and self.p(0.15):
                noun.add(self.relative_clause(noun))
        return noun

    @staticmethod
    def _adj(en: str) -> _Node:
        node = _Node(en, en, "ADJ", "amod")
        node.de = _ADJECTIVES[en][0]
        return node

    def prep_phrase(self, deprel: str) -> _Node:
        prep = self.choice(list(_VERB_PREPS))
        pde, pcls = _VERB_PREPS[prep]
        noun = self.noun_phrase(pcls, deprel, nested=True, allow_rel=False)
        noun.add(_Node(prep, prep, "ADP", "case")).de = pde
        return noun

    # clauses ---------------------------------------------------------------

    def _verb_node(self, verb: _Verb, deprel: str, perfect: bool) -> _Node:
        if perfect:
            node = _Node(verb.en_part, verb.lemma, "VERB", deprel)
            node.add(_Node("has", "have", "AUX", "aux")).de = verb.de_aux
        else:
            node = _Node(verb.en_3sg, verb.lemma, "VERB", deprel)
        node.verb = verb
        return node

    def _clause_dependents(self, v: _Node, allow_rel: bool) -> None:
        if self.p(0.25):
            adv = self.choice(list(_ADVERBS))
            v.add(_Node(adv, adv, "ADV", "advmod")).de = _ADVERBS[adv]
        if self.p(0.3):
            v.add(self.prep_phrase("obl"))

    def clause(self, deprel: str, allow_rel: bool) -> _Node:
        verb = self.choice(_VERBS)
        v = self._verb_node(verb, deprel, perfect=self.p(0.3))
        v.add(self.noun_phrase(verb.subj_classes, "nsubj", nested=False,
                               allow_rel=allow_rel))
        if verb.obj_classes:
            v.add(self.noun_phrase(verb.obj_classes, "obj", nested=False,
                                   allow_rel=allow_rel))
        self._clause_dependents(v, allow_rel)
        return v

    def relative_clause(self, antecedent: _Node) -> _Node:
        sem = _NOUNS[antecedent.form][2]
        subject_rel = sem in _ANIMATE and self.p(0.6)
        if subject_rel:
            verb = self.choice([vb for vb in _VERBS if sem in vb.subj_classes])
        else:  # every noun class is the object of some verb
            verb = self.choice([vb for vb in _VERBS if sem in vb.obj_classes])
        v = self._verb_node(verb, "acl:relcl", perfect=self.p(0.3))
        pron = v.add(_Node("that", "that", "PRON", "nsubj" if subject_rel else "obj"))
        pron.gender = antecedent.gender
        if subject_rel:
            if verb.obj_classes:
                v.add(self.noun_phrase(verb.obj_classes, "obj", nested=True,
                                       allow_rel=False))
        else:
            v.add(self.noun_phrase(verb.subj_classes, "nsubj", nested=True,
                                   allow_rel=False))
        if self.p(0.15):
            adv = self.choice(list(_ADVERBS))
            v.add(_Node(adv, adv, "ADV", "advmod")).de = _ADVERBS[adv]
        return v

    def sentence(self) -> _Node:
        root = self.clause("root", allow_rel=True)
        if self.p(0.3):
            sub = self.clause("advcl", allow_rel=False)
            sconj = self.choice(list(_SUBORDINATORS))
            sub.add(_Node(sconj, sconj, "SCONJ", "mark")).de = _SUBORDINATORS[sconj]
            sub.fronted = self.p(0.35)
            if sub.fronted:
                sub.add(_Node(",", ",", "PUNCT", "punct"))
            root.add(sub)
        root.add(_Node(".", ".", "PUNCT", "punct"))
        return root


# --------------------------------------------------------------------------
# Linearisation
# --------------------------------------------------------------------------


def _en_order(node: _Node) -> List[_Node]:
    """English word order of the subtree of ``node``."""
    if node.upos in ("VERB",):
        out: List[_Node] = []
        mark = node.child("mark")
        advcl = node.child("advcl")
        if advcl is not None and advcl.fronted:
            out += _en_order(advcl)
        if mark is not None:
            out.append(mark)
        pron = [c for c in node.children if c.upos == "PRON"]
        out += pron  # relative "that" opens its clause
        subj = node.child("nsubj")
        if subj is not None and subj.upos != "PRON":
            out += _en_order(subj)
        aux = node.child("aux")
        if aux is not None:
            out.append(aux)
        out += node.all("advmod")
        out.append(node)
        obj = node.child("obj")
        if obj is not None and obj.upos != "PRON":
            out += _en_order(obj)
        for obl in node.all("obl"):
            out += _en_order(obl)
        if advcl is not None and not advcl.fronted:
            out += _en_order(advcl)
        out += [c for c in node.all("punct") if c.form == ","]
        out += [c for c in node.all("punct") if c.form != ","]
        return out
    if node.upos == "NOUN":
        out = node.all("case") + node.all("det") + node.all("amod") + [node]
        for c in node.children:
            if c.deprel in ("nmod", "acl:relcl"):
                out += _en_order(c)
        return out
    return [node]


def _case_of(noun: _Node) -> str:
    if noun.child("case") is not None:
        return "dat"
    return {"nsubj": "nom", "obj": "acc"}.get(noun.deprel, "nom")


def _de_noun_phrase(noun: _Node) -> List[str]:
    case = _case_of(noun)
    g = noun.gender
    out = [c.de for c in noun.all("case")]
    out.append((_DEF if noun.definite else _INDEF)[case][g])
    ends = _ADJ_END_DEF if noun.definite else _ADJ_END_INDEF
    for adj in noun.all("amod"):
        out.append(adj.de + ends[case][g])
    out.append(noun.de)
    for c in noun.children:
        if c.deprel == "nmod":
            out += _de_noun_phrase(c)
        elif c.deprel == "acl:relcl":
            out += [","] + _de_clause(c, "rel") + [","]
    return out


def _de_clause(v: _Node, kind: str) -> List[str]:
    """German order of a clause: kind is 'main', 'sub' or 'rel'."""
    verb = v.verb
    aux = v.child("aux")
    finite = aux.de if aux is not None else verb.de_3sg
    participle = verb.de_part if aux is not None else None
    subj = v.child("nsubj")
    obj = v.child("obj")
    advs = [c.de for c in v.all("advmod")]
    middle: List[str] = list(advs)  # Mittelfeld after the subject
    if obj is not None and obj.upos != "PRON":
        middle += _de_noun_phrase(obj)
    for obl in v.all("obl"):
        middle += _de_noun_phrase(obl)
    subj_words = [] if subj is None or subj.upos == "PRON" else _de_noun_phrase(subj)
    advcl = v.child("advcl")
    if kind == "main":
        out: List[str] = []
        if advcl is not None and advcl.fronted:
            # the subordinate clause fills the first position: verb, then subject
            out += _de_clause(advcl, "sub") + [","]
            out += [finite] + subj_words + middle
        else:
            out += subj_words + [finite] + middle
        if participle:
            out.append(participle)
        if advcl is not None and not advcl.fronted:
            out += [","] + _de_clause(advcl, "sub")
        out.append(".")
        return out
    if kind == "sub":
        out = [v.child("mark").de] + subj_words + middle
    else:  # relative clause: pronoun agrees with the antecedent, case from its role
        pron = [c for c in v.children if c.upos == "PRON"][0]
        case = "nom" if pron.deprel == "nsubj" else "acc"
        out = [_REL_PRON[case][pron.gender]] + subj_words + middle
    if participle:
        out.append(participle)
    out.append(finite)
    return out


def _tidy_punct(tokens: List[str]) -> List[str]:
    out: List[str] = []
    for t in tokens:
        if t in (",", ".") and out and out[-1] == ",":
            out[-1] = t  # ", ," -> "," and ", ." -> "."
            continue
        out.append(t)
    return out


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyExample:
    """One sentence pair; ``heads`` are 1-based, 0 marks the root."""

    src: Tuple[str, ...]
    heads: Tuple[int, ...]
    tgt: Tuple[str, ...]
    deprels: Tuple[str, ...]
    upos: Tuple[str, ...]
    lemmas: Tuple[str, ...]


def _make_example(rng: random.Random) -> ToyExample:
    root = _Grammar(rng).sentence()
    order = _en_order(root)
    for i, node in enumerate(order, start=1):
        node.index = i
        if node.form == "a" and i < len(order) and order[i].form[0] in "aeiou":
            node.form = "an"
    heads = tuple(0 if n.head is None else n.head.index for n in order)
    tgt = _tidy_punct(_de_clause(root, "main"))
    return ToyExample(
        src=tuple(n.form for n in order),
        heads=heads,
        tgt=tuple(tgt),
        deprels=tuple(n.deprel for n in order),
        upos=tuple(n.upos for n in order),
        lemmas=tuple(n.lemma for n in order),
    )


def generate_examples(n: int, seed: int = 1, unique: bool = True) -> List[ToyExample]:
    """Return ``n`` examples sampled with ``random.Random(seed)``.

    With ``unique`` (default) no source sentence occurs twice.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = random.Random(seed)
    out: List[ToyExample] = []
    seen = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise RuntimeError(
                "could not sample %d distinct sentences (got %d)" % (n, len(out))
            )
        ex = _make_example(rng)
        if unique:
            if ex.src in seen:
                continue
            seen.add(ex.src)
        out.append(ex)
    return out


def generate_splits(sizes: Dict[str, int], seed: int = 1) -> Dict[str, List[ToyExample]]:
    """Disjoint splits, e.g. ``generate_splits({"train": 1000, "valid": 100})``.

    All sentences are sampled together and shuffled before they are divided,
    so every split follows the same distribution.
    """
    total = sum(sizes.values())
    pool = generate_examples(total, seed=seed, unique=True)
    random.Random(seed + 1).shuffle(pool)
    out: Dict[str, List[ToyExample]] = {}
    start = 0
    for split, size in sizes.items():
        out[split] = pool[start:start + size]
        start += size
    return out


def detokenize(tokens: Sequence[str]) -> str:
    """Join tokens into running text: no space before ',' and '.'."""
    text = ""
    for t in tokens:
        if not text:
            text = t
        elif t in (",", "."):
            text += t
        else:
            text += " " + t
    return text


def to_conllu(ex: ToyExample, sent_id: Optional[str] = None) -> str:
    """The source tree of ``ex`` as one CoNLL-U sentence (ends with a blank line)."""
    lines = []
    if sent_id is not None:
        lines.append("# sent_id = %s" % sent_id)
    lines.append("# text = %s" % " ".join(ex.src))
    for i, (form, lemma, upos, head, rel) in enumerate(
        zip(ex.src, ex.lemmas, ex.upos, ex.heads, ex.deprels), start=1
    ):
        lines.append("\t".join(
            [str(i), form, lemma, upos, "_", "_", str(head), rel, "_", "_"]))
    return "\n".join(lines) + "\n\n"


def write_split(examples: Sequence[ToyExample], out_dir: str, split: str,
                src_lang: str = "en", tgt_lang: str = "de") -> Dict[str, str]:
    """Write ``{split}.{src_lang}``, ``{split}.{tgt_lang}`` (one tokenized
    sentence a line) and ``{split}.{src_lang}.conllu``; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        "src": os.path.join(out_dir, "%s.%s" % (split, src_lang)),
        "tgt": os.path.join(out_dir, "%s.%s" % (split, tgt_lang)),
        "conllu": os.path.join(out_dir, "%s.%s.conllu" % (split, src_lang)),
    }
    with open(paths["src"], "w", encoding="utf-8") as fs, \
            open(paths["tgt"], "w", encoding="utf-8") as ft, \
            open(paths["conllu"], "w", encoding="utf-8") as fc:
        for i, ex in enumerate(examples, start=1):
            fs.write(" ".join(ex.src) + "\n")
            ft.write(" ".join(ex.tgt) + "\n")
            fc.write(to_conllu(ex, sent_id="%s-%d" % (split, i)))
    return paths


def write_corpus(out_dir: str, train: int, valid: int, test: int, seed: int = 1,
                 src_lang: str = "en", tgt_lang: str = "de") -> Dict[str, Dict[str, str]]:
    """Generate disjoint train/valid/test splits and write them to ``out_dir``."""
    splits = generate_splits({"train": train, "valid": valid, "test": test}, seed=seed)
    return {
        split: write_split(exs, out_dir, split, src_lang, tgt_lang)
        for split, exs in splits.items()
    }


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="fairseq-posattn-toy-corpus",
        description="Write a synthetic English -> German-like parallel corpus "
        "with CoNLL-U dependency trees of the source side.",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--valid", type=int, default=200)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--src-lang", default="en")
    parser.add_argument("--tgt-lang", default="de")
    args = parser.parse_args(argv)
    for name in ("train", "valid", "test"):
        if getattr(args, name) < 0:
            parser.error("--%s must be >= 0" % name)
    paths = write_corpus(args.out, args.train, args.valid, args.test, seed=args.seed,
                         src_lang=args.src_lang, tgt_lang=args.tgt_lang)
    for split, p in paths.items():
        print("%s: %d sentences -> %s, %s, %s" % (
            split, getattr(args, split), p["src"], p["tgt"], p["conllu"]))
    sys.stdout.flush()


if __name__ == "__main__":
    cli_main()
