"""Raw text as every route reads it: the recipes' corpus preparation, parsing,
``fairseq-interactive`` and the hub.

subword-nmt and sentencepiece split words at the space U+0020 alone; fairseq
(``tokenize_line``), Moses' punctuation normalizer and the parsers split at, or
drop, every other whitespace character too (tab, vertical tab, form feed,
U+001C-U+001F, U+0085, U+00A0, U+2028, U+202F, U+3000, ...).  A subword piece
that kept one loses it in fairseq, and the pieces on its two sides make one
word ('the car\\x1c the dog' read as 'the carthe dog') or leave a dangling
``@@``.  :func:`spaces_for_separators` reads each as a space first;
:func:`unreadable` says why a line is no text to translate.
"""

import re
from typing import List, Optional, Tuple

from ..errors import unusual_characters

SEPARATORS = re.compile(r"[^\S ]")  # whitespace but the space
_ESCAPED_BYTES = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, read with surrogateescape
_SURROGATES = re.compile("[\ud800-\udfff]")


def spaces_for_separators(text: str) -> Tuple[str, List[str]]:
    """``text`` with every whitespace character but the space replaced by a
    space, and the names of the characters replaced (``["U+001C ..."]``)."""
    found = SEPARATORS.findall(text)
    if not found:
        return text, []
    return SEPARATORS.sub(" ", text), unusual_characters("".join(found))


def unreadable(text: str) -> Optional[str]:
    """Why ``text`` is no sentence to translate ('is empty', 'holds only
    whitespace', 'is not valid UTF-8 (...)'), or None."""
    if not text.strip():
        return "is empty" if not text else "holds only whitespace"
    escaped = _ESCAPED_BYTES.search(text)
    if escaped:
        return "is not valid UTF-8 (byte 0x%02X at character %d)" % (
            ord(escaped.group()) - 0xDC00, escaped.start() + 1)
    surrogate = _SURROGATES.search(text)
    if surrogate:
        return "is not valid UTF-8 (a lone surrogate U+%04X at character %d)" % (
            ord(surrogate.group()), surrogate.start() + 1)
    return None


class MosesText:
    """The recipes' tokenization of one line (``fairseq-posattn-corpus tokenize``
    and the ``moses_normalized`` tokenizer): separators read as spaces, Moses'
    punctuation normalization, Moses tokenization without XML escaping."""

    def __init__(self, lang: str, aggressive_dashes: bool):
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        self.normalizer = MosesPunctNormalizer(lang=lang, post_remove_control_chars=True)
        self.tokenizer = MosesTokenizer(lang=lang)
        self.aggressive_dashes = aggressive_dashes

    def __call__(self, line: str) -> str:
        line = self.normalizer.normalize(spaces_for_separators(line)[0])
        return " ".join(self.tokenizer.tokenize(line, escape=False,
                                                aggressive_dash_splits=self.aggressive_dashes))
