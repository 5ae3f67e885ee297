"""``--tokenizer moses_normalized``: the recipes' tokenization
(:class:`~fairseq_posattn.data.raw_text.MosesText`) for fairseq-interactive and
the hub, so that raw text is read as the training data was.  fairseq's own
``moses`` skips the punctuation normalization and escapes XML characters."""

from dataclasses import dataclass, field

from fairseq.data.encoders import register_tokenizer
from fairseq.dataclass import FairseqDataclass

from .raw_text import MosesText


@dataclass
class NormalizedMosesConfig(FairseqDataclass):
    source_lang: str = field(default="en", metadata={"help": "source language"})
    target_lang: str = field(default="en", metadata={"help": "target language"})
    moses_no_dash_splits: bool = field(default=False, metadata={
        "help": "don't split hyphenated words (fairseq-posattn-corpus tokenize without "
                "--aggressive-dashes)"})


@register_tokenizer("moses_normalized", dataclass=NormalizedMosesConfig)
class NormalizedMosesTokenizer:
    """Encode as ``fairseq-posattn-corpus tokenize``; decode as its ``detokenize``."""

    def __init__(self, cfg: NormalizedMosesConfig):
        from sacremoses import MosesDetokenizer

        self.encode = MosesText(cfg.source_lang, not cfg.moses_no_dash_splits)
        self.detokenizer = MosesDetokenizer(lang=cfg.target_lang)

    def decode(self, text: str) -> str:
        return self.detokenizer.detokenize(text.split())
