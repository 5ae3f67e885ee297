"""A small synthetic English -> "German-like" parallel corpus with dependency trees.

Made by the project itself for the quickstart and the end-to-end tests,
deterministic for a seed, and *syntax-sensitive*: a probabilistic grammar
samples an unordered dependency tree, whose English linearisation gives the
source and its projective UD-style tree (heads 1-based, 0 = root) and whose
German-like linearisation gives the target (:func:`target_from_tree`: lexicon,
case and gender agreement, verb-second main and verb-final subordinate clauses).
Three constructions have two trees for one English string, chosen by a coin
flip that does not look at the words (:func:`readings`, :func:`ambiguity_kinds`):
``pp`` (a PP after an object: the object's ``nmod`` or the verb's ``obl``),
``rel`` (a relative clause after "the N of the N": either noun's) and ``adv``
(a clause-final adverb after a subordinate clause: either verb's)::

    the teacher eats the cake behind the table .
    2 3 0 5 3 8 8 5 3      der Lehrer isst den Kuchen hinter dem Tisch .
    2 3 0 5 3 8 8 3 3      der Lehrer isst hinter dem Tisch den Kuchen .

Examples are unique by (source string, tree), also across the splits of one call.
docs/results.md (Quickstart toy-corpus BLEU) describes the corpus.
"""

import argparse
import itertools
import os
import random
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["ToyExample", "generate_examples", "generate_splits", "detokenize", "to_conllu",
           "write_split", "write_corpus", "cli_main", "target_from_tree", "readings",
           "ambiguity_kinds"]

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
_VERB_BY_LEMMA: Dict[str, _Verb] = {v.lemma: v for v in _VERBS}

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

# Adverbs that stand before the English verb ("the dog often sleeps") and
# adverbs that close the English clause ("the dog sleeps today").  In German
# both open the middle field, right after the finite verb (main clause) or
# the subject (subordinate and relative clauses).
_PRE_ADVERBS: Dict[str, str] = {"often": "oft", "always": "immer"}
_FINAL_ADVERBS: Dict[str, str] = {"today": "heute", "again": "wieder", "there": "dort"}

# preposition: (german, classes of its noun); all take the dative here.  Every
# one of them can modify a noun (nmod) or a verb (obl), and which one it does is
# drawn independently of the words, so only the tree tells them apart.
_PREPS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "with": ("mit", ("person", "animal", "thing")),
    "in": ("in", ("place",)),
    "near": ("neben", ("place", "thing")),
    "behind": ("hinter", ("place", "thing")),
    "from": ("aus", ("place",)),
}
# "the friend of the teacher" -> "der Freund von dem Lehrer" (nmod, dative)
_OF = ("of", "von")

_SUBORDINATORS: Dict[str, str] = {"because": "weil", "when": "wenn", "although": "obwohl",
                                   "if": "falls"}
# The German word of a source word of these tags (nouns and verbs carry theirs otherwise).
_DE_BY_UPOS: Dict[str, Dict[str, str]] = {
    "ADJ": {en: de for en, (de, _) in _ADJECTIVES.items()},
    "ADV": {**_PRE_ADVERBS, **_FINAL_ADVERBS},
    "ADP": {**{en: de for en, (de, _) in _PREPS.items()}, _OF[0]: _OF[1]},
    "SCONJ": _SUBORDINATORS}

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

# Probabilities of the grammar (per clause / noun phrase).
_P_PERFECT = 0.3        # "has seen" instead of "sees"
_P_PRE_ADV = 0.15       # "often"/"always" before the verb
_P_FINAL_ADV = 0.2      # "today"/"again"/"there" at the end of the clause
_P_OBJ_PP = 0.6         # a PP after a (plain) object: attached to it or to the verb
_P_NMOD = 0.5           # ... of which attached to the object noun
_P_INTRANS_PP = 0.3     # a PP (obl) in a clause without an object
_P_SUBJ_PP = 0.1        # "the man with the dog sees ..." (unambiguous)
_P_OF = 0.15            # "the friend of the teacher" (animate nouns, main clause)
_P_OF_REL = 0.7         # ... followed by a relative clause on either noun
_P_REL = 0.12           # a relative clause on a noun (main clause)
_P_SUBJ_REL = 0.6       # subject relative ("that sleeps") vs object relative
_P_ADVCL = 0.35         # a subordinate clause
_P_FRONTED = 0.35       # ... placed before the main clause


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
        self.de: Optional[str] = _DE_BY_UPOS.get(upos, {}).get(lemma)  # lexical translation
        self.gender: Optional[str] = None
        self.definite: Optional[bool] = None
        self.verb: Optional[_Verb] = None
        self.fronted = False
        self.index = 0  # 1-based position in the English sentence

    def add(self, child: "_Node", first: bool = False) -> "_Node":
        child.head = self
        self.children.insert(0 if first else len(self.children), child)
        return child

    def detach(self) -> "_Node":
        self.head.children.remove(self)
        self.head = None
        return self

    def child(self, *deprels) -> Optional["_Node"]:
        return next((c for c in self.children if c.deprel in deprels), None)

    def all(self, *deprels) -> List["_Node"]:
        return [c for c in self.children if c.deprel in deprels]

    def nmod(self, of: bool) -> Optional["_Node"]:
        """The "of" noun modifier of a noun (``of``) or its prepositional one, if any."""
        return next((c for c in self.all("nmod") if (c.child("case").lemma == _OF[0]) == of), None)

    def final_advs(self) -> List["_Node"]:
        return [c for c in self.all("advmod") if c.lemma in _FINAL_ADVERBS]


def _word(en: str, upos: str, deprel: str) -> _Node:
    return _Node(en, en, upos, deprel)


def _make_noun(en: str, deprel: str, definite: bool) -> _Node:
    de, gender, _ = _NOUNS[en]
    noun = _Node(en, en, "NOUN", deprel)
    noun.de, noun.gender, noun.definite = de, gender, definite
    noun.add(_word("the" if definite else "a", "DET", "det"))
    return noun


class _Grammar:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def p(self, prob: float) -> bool:
        return self.rng.random() < prob

    def choice(self, seq):
        seq = list(seq)
        return seq[self.rng.randrange(len(seq))]

    def bare_noun(self, classes, deprel: str, genders=("m", "f", "n")) -> _Node:
        """Determiner, adjectives and noun, no modifiers."""
        en = self.choice(n for n, (_, g, c) in _NOUNS.items() if c in classes and g in genders)
        noun = _make_noun(en, deprel, definite=self.p(0.7))
        if self.p(0.35):
            sem = _NOUNS[en][2]
            adjs = [a for a, (_, cls) in _ADJECTIVES.items() if sem in cls]
            first = self.choice(adjs)
            noun.add(_word(first, "ADJ", "amod"))
            if self.p(0.15):
                noun.add(_word(self.choice([a for a in adjs if a != first]), "ADJ", "amod"))
        return noun

    def noun_phrase(self, classes, deprel, allow_rel: bool, allow_pp: bool) -> _Node:
        noun = self.bare_noun(classes, deprel)
        sem = _NOUNS[noun.lemma][2]
        if allow_rel and sem in _ANIMATE and self.p(_P_OF):
            # "the friend of the teacher (that sleeps)": the second noun has
            # another gender, so the German relative pronoun shows which noun
            # the relative clause belongs to.
            other = self.bare_noun(
                _ANIMATE, "nmod", genders=[g for g in "mfn" if g != noun.gender])
            other.add(_word(_OF[0], "ADP", "case"), first=True)
            noun.add(other)
            if self.p(_P_OF_REL):
                antecedent = noun if self.p(0.5) else other
                antecedent.add(self.relative_clause(antecedent, [noun, other]))
        elif allow_rel and self.p(_P_REL):
            noun.add(self.relative_clause(noun, [noun]))
        elif allow_pp and self.p(_P_SUBJ_PP):
            noun.add(self.prep_phrase("nmod"))
        return noun

    def prep_phrase(self, deprel: str) -> _Node:
        prep = self.choice(_PREPS)
        noun = self.bare_noun(_PREPS[prep][1], deprel)
        noun.add(_word(prep, "ADP", "case"), first=True)
        return noun

    def adverb(self, adverbs: Dict[str, str]) -> _Node:
        return _word(self.choice(adverbs), "ADV", "advmod")

    def _verb_node(self, verb: _Verb, deprel: str) -> _Node:
        if self.p(_P_PERFECT):
            node = _Node(verb.en_part, verb.lemma, "VERB", deprel)
            node.add(_Node("has", "have", "AUX", "aux")).de = verb.de_aux
        else:
            node = _Node(verb.en_3sg, verb.lemma, "VERB", deprel)
        node.verb = verb
        return node

    def clause(self, deprel: str, allow_rel: bool) -> _Node:
        verb = self.choice(_VERBS)
        v = self._verb_node(verb, deprel)
        v.add(self.noun_phrase(verb.subj_classes, "nsubj", allow_rel, allow_pp=True))
        obj = None
        if verb.obj_classes:
            obj = v.add(self.noun_phrase(verb.obj_classes, "obj", allow_rel,
                                         allow_pp=False))
        if self.p(_P_PRE_ADV):
            v.add(self.adverb(_PRE_ADVERBS))
        if self.p(_P_FINAL_ADV):
            v.add(self.adverb(_FINAL_ADVERBS))
        if obj is not None:
            # "sees the man with the telescope": same English words either way
            if not obj.all("nmod", "acl:relcl") and self.p(_P_OBJ_PP):
                if self.p(_P_NMOD):
                    obj.add(self.prep_phrase("nmod"))
                else:
                    v.add(self.prep_phrase("obl"))
        elif self.p(_P_INTRANS_PP):
            v.add(self.prep_phrase("obl"))
        return v

    def relative_clause(self, antecedent: _Node, nouns: Sequence[_Node]) -> _Node:
        """A relative clause on ``antecedent`` that would fit every noun in ``nouns``."""
        sems = {_NOUNS[n.lemma][2] for n in nouns}
        subject_rel = all(s in _ANIMATE for s in sems) and self.p(_P_SUBJ_REL)
        if subject_rel:
            verb = self.choice(vb for vb in _VERBS if sems <= set(vb.subj_classes))
        else:  # every noun class is the object of some verb
            verb = self.choice(vb for vb in _VERBS if sems <= set(vb.obj_classes))
        v = self._verb_node(verb, "acl:relcl")
        v.add(_word("that", "PRON", "nsubj" if subject_rel else "obj")).gender = antecedent.gender
        if subject_rel:
            if verb.obj_classes:
                v.add(self.bare_noun(verb.obj_classes, "obj"))
        else:
            v.add(self.bare_noun(verb.subj_classes, "nsubj"))
        if self.p(_P_PRE_ADV):
            v.add(self.adverb(_PRE_ADVERBS))
        return v

    def sentence(self) -> _Node:
        root = self.clause("root", allow_rel=True)
        if self.p(_P_ADVCL):
            sub = self.clause("advcl", allow_rel=False)
            sub.add(_word(self.choice(_SUBORDINATORS), "SCONJ", "mark"))
            sub.fronted = self.p(_P_FRONTED)
            if sub.fronted:
                sub.add(_word(",", "PUNCT", "punct"))
            root.add(sub)
        root.add(_word(".", "PUNCT", "punct"))
        return root


def _en_order(node: _Node) -> List[_Node]:
    """English word order of the subtree of ``node``."""
    if node.upos == "VERB":
        out: List[_Node] = []
        mark = node.child("mark")
        advcl = node.child("advcl")
        if advcl is not None and advcl.fronted:
            out += _en_order(advcl)
        if mark is not None:
            out.append(mark)
        out += [c for c in node.children if c.upos == "PRON"]  # "that" opens its clause
        subj = node.child("nsubj")
        if subj is not None and subj.upos != "PRON":
            out += _en_order(subj)
        out += node.all("aux")
        out += [c for c in node.all("advmod") if c.lemma in _PRE_ADVERBS]
        out.append(node)
        obj = node.child("obj")
        if obj is not None and obj.upos != "PRON":
            out += _en_order(obj)
        for obl in node.all("obl"):
            out += _en_order(obl)
        if advcl is not None and not advcl.fronted:
            out += _en_order(advcl)
        # after a following subordinate clause: "... when the dog sings again ."
        out += node.final_advs()
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


def _de_noun_phrase(noun: _Node) -> List[str]:
    has_prep = noun.child("case") is not None
    case = "dat" if has_prep else {"nsubj": "nom", "obj": "acc"}.get(noun.deprel, "nom")
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
    """German order of a clause: kind is 'main', 'sub' or 'rel'.

    Middle field: adverbs, then verb-attached PPs (obl), then the object with
    its own modifiers; so "sees the man with the dog" is "sieht den Mann mit
    dem Hund" when the PP belongs to the man and "sieht mit dem Hund den Mann"
    when it belongs to the verb.
    """
    verb = v.verb
    aux = v.child("aux")
    finite = aux.de if aux is not None else verb.de_3sg
    participle = verb.de_part if aux is not None else None
    subj = v.child("nsubj")
    obj = v.child("obj")
    advs = [c for c in v.all("advmod") if c.lemma in _PRE_ADVERBS] + v.final_advs()
    middle: List[str] = [c.de for c in advs]
    for obl in v.all("obl"):
        middle += _de_noun_phrase(obl)
    if obj is not None and obj.upos != "PRON":
        middle += _de_noun_phrase(obj)
    subj_words = [] if subj is None or subj.upos == "PRON" else _de_noun_phrase(subj)
    advcl = v.child("advcl")
    if kind == "main":
        if advcl is not None and advcl.fronted:
            # the subordinate clause fills the first position: verb, then subject
            out = _de_clause(advcl, "sub") + [",", finite] + subj_words + middle
        else:
            out = subj_words + [finite] + middle
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
        else:
            out.append(t)
    return out


@dataclass(frozen=True)
class ToyExample:
    """One sentence pair; ``heads`` are 1-based, 0 marks the root."""

    src: Tuple[str, ...]
    heads: Tuple[int, ...]
    tgt: Tuple[str, ...]
    deprels: Tuple[str, ...]
    upos: Tuple[str, ...]
    lemmas: Tuple[str, ...]


def _example_from_tree(root: _Node) -> ToyExample:
    order = _en_order(root)
    for i, node in enumerate(order, start=1):
        node.index = i
        if node.lemma == "a":
            node.form = "an" if i < len(order) and order[i].form[0] in "aeiou" else "a"
    return ToyExample(
        src=tuple(n.form for n in order),
        heads=tuple(0 if n.head is None else n.head.index for n in order),
        tgt=tuple(_tidy_punct(_de_clause(root, "main"))),
        deprels=tuple(n.deprel for n in order),
        upos=tuple(n.upos for n in order),
        lemmas=tuple(n.lemma for n in order),
    )


def _tree_from_example(ex: ToyExample) -> _Node:
    """Rebuild the tree of ``ex`` from its heads, relations, tags and lemmas
    (the word forms are not read) and the lexicon; return the root."""
    nodes = [_Node(None, lemma, upos, rel)
             for lemma, upos, rel in zip(ex.lemmas, ex.upos, ex.deprels)]
    root = None
    for i, (node, head) in enumerate(zip(nodes, ex.heads), start=1):
        node.index = i
        if head == 0:
            root = node
        else:
            nodes[head - 1].add(node)  # children in English order
    if root is None or sum(h == 0 for h in ex.heads) != 1:
        raise ValueError("not a tree with one root: %s" % (ex.heads,))
    for node in nodes:
        lemma, upos = node.lemma, node.upos
        node.form = lemma
        if upos == "VERB":
            node.verb = _VERB_BY_LEMMA[lemma]
            node.form = node.verb.en_3sg
        elif upos == "NOUN":
            node.de, node.gender, _ = _NOUNS[lemma]
            node.definite = node.child("det").lemma == "the"
    for node in nodes:
        if node.upos == "AUX":
            node.form = "has"
            node.de = node.head.verb.de_aux
            node.head.form = node.head.verb.en_part
        elif node.upos == "PRON":  # the antecedent is the head of the clause
            node.gender = node.head.head.gender
        elif node.deprel == "advcl":
            node.fronted = node.index < node.head.index
    return root


def target_from_tree(ex: ToyExample) -> Tuple[str, ...]:
    """The German-like target for the source tree of ``ex``, from its ``heads``,
    ``deprels``, ``upos`` and ``lemmas`` (what the CoNLL-U file holds) alone."""
    return tuple(_tidy_punct(_de_clause(_tree_from_example(ex), "main")))


# The ambiguities: ways to re-attach one subtree that keep the English string.

def _flip_points(root: _Node) -> List[Tuple[str, _Node]]:
    """(kind, node) for every attachment in ``root`` that could be the other
    way round with the same English words, in English order."""
    points: List[Tuple[str, _Node]] = []

    def visit(node: _Node) -> None:
        if node.upos == "VERB":
            obj = node.child("obj")
            if obj is not None and obj.upos == "NOUN":
                pp = obj.nmod(of=False)
                if pp is not None and not obj.all("acl:relcl") and not node.all("obl"):
                    points.append(("pp", pp))
                elif pp is None and not obj.all("nmod", "acl:relcl"):
                    for obl in node.all("obl"):
                        points.append(("pp", obl))
            advcl = node.child("advcl")
            if advcl is not None and not advcl.fronted:
                mine, theirs = node.final_advs(), advcl.final_advs()
                if len(mine) + len(theirs) == 1:
                    points.append(("adv", (mine + theirs)[0]))
        if node.upos == "NOUN":
            of = node.nmod(of=True)
            if of is not None:
                rel = node.child("acl:relcl") or of.child("acl:relcl")
                if rel is not None:
                    points.append(("rel", rel))
        for c in node.children:
            visit(c)

    visit(root)
    return points


def _flip(kind: str, node: _Node) -> None:
    head = node.head
    node.detach()
    if kind == "pp":
        if node.deprel == "nmod":  # object's modifier -> the verb's
            node.deprel = "obl"
            head.head.add(node)
        else:  # the verb's -> the object's
            node.deprel = "nmod"
            head.child("obj").add(node)
    elif kind == "adv":
        if head.deprel == "advcl":
            head.head.add(node)
        else:
            head.child("advcl").add(node)
    else:  # "rel": the relative pronoun agrees with its new antecedent
        pron = next(c for c in node.children if c.upos == "PRON")
        antecedent = head.head if head.deprel == "nmod" else head.nmod(of=True)
        antecedent.add(node)
        pron.gender = antecedent.gender


def ambiguity_kinds(ex: ToyExample) -> List[str]:
    """The ambiguous constructions in ``ex`` ("pp", "rel" or "adv", as the module
    docstring defines them), in English order."""
    return [kind for kind, _ in _flip_points(_tree_from_example(ex))]


def readings(ex: ToyExample) -> List[ToyExample]:
    """Every example the grammar can make with the source string of ``ex``:
    ``ex`` itself first, then the other attachments of its ambiguous
    constructions (2 ** len(ambiguity_kinds(ex)) in all), each with its tree
    and its own target."""
    n_points = len(_flip_points(_tree_from_example(ex)))
    out = [ex]
    for mask in range(1, 2 ** n_points):
        root = _tree_from_example(ex)
        points = _flip_points(root)  # same order on a fresh copy
        for bit, (kind, node) in enumerate(points):
            if mask >> bit & 1:
                _flip(kind, node)
        alt = _example_from_tree(root)
        if alt.src != ex.src:
            raise AssertionError("re-attachment changed the source: %s / %s"
                                 % (ex.src, alt.src))
        out.append(alt)
    return out


def generate_examples(n: int, seed: int = 1, unique: bool = True) -> List[ToyExample]:
    """Return ``n`` examples sampled with ``random.Random(seed)``.

    With ``unique`` (default) no (source sentence, tree) pair occurs twice; the
    same source string may occur with different trees (and targets).
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = random.Random(seed)
    out: List[ToyExample] = []
    seen = set()  # (source string, tree) of each example
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise RuntimeError("could not sample %d distinct sentences (got %d)" % (n, len(out)))
        ex = _example_from_tree(_Grammar(rng).sentence())
        if not (unique and (ex.src, ex.heads, ex.deprels) in seen):
            seen.add((ex.src, ex.heads, ex.deprels))
            out.append(ex)
    return out


def generate_splits(sizes: Dict[str, int], seed: int = 1) -> Dict[str, List[ToyExample]]:
    """Disjoint splits, e.g. ``generate_splits({"train": 1000, "valid": 100})``: all
    sentences are sampled together and shuffled before they are divided, so every
    split follows the same distribution; no (source, tree) pair is in two splits."""
    total = sum(sizes.values())
    pool = generate_examples(total, seed=seed, unique=True)
    random.Random(seed + 1).shuffle(pool)
    ends = itertools.accumulate(sizes.values())
    return {split: pool[end - size:end] for (split, size), end in zip(sizes.items(), ends)}


def detokenize(tokens: Sequence[str]) -> str:
    """Join tokens into running text: no space before ',' and '.'."""
    text = ""
    for t in tokens:
        text += t if not text or t in (",", ".") else " " + t
    return text


def to_conllu(ex: ToyExample, sent_id: Optional[str] = None) -> str:
    """The source tree of ``ex`` as one CoNLL-U sentence (ends with a blank line)."""
    lines = [] if sent_id is None else ["# sent_id = %s" % sent_id]
    lines.append("# text = %s" % " ".join(ex.src))
    for i, (form, lemma, upos, head, rel) in enumerate(
            zip(ex.src, ex.lemmas, ex.upos, ex.heads, ex.deprels), start=1):
        lines.append("\t".join([str(i), form, lemma, upos, "_", "_", str(head), rel, "_", "_"]))
    return "\n".join(lines) + "\n\n"


def write_split(examples: Sequence[ToyExample], out_dir: str, split: str,
                src_lang: str = "en", tgt_lang: str = "de") -> Dict[str, str]:
    """Write ``{split}.{src_lang}``, ``{split}.{tgt_lang}`` (one tokenized
    sentence a line) and ``{split}.{src_lang}.conllu``; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    names = {"src": f"{split}.{src_lang}", "tgt": f"{split}.{tgt_lang}",
             "conllu": f"{split}.{src_lang}.conllu"}
    paths = {key: os.path.join(out_dir, name) for key, name in names.items()}
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
    return {split: write_split(exs, out_dir, split, src_lang, tgt_lang)
            for split, exs in splits.items()}


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="fairseq-posattn-toy-corpus",
        description="Write a synthetic English -> German-like parallel corpus "
        "with CoNLL-U dependency trees of the source side.",
    )
    parser.add_argument("--out", required=True, help="output directory")
    for split, size in (("train", 2000), ("valid", 200), ("test", 200)):
        parser.add_argument("--" + split, type=int, default=size)
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
