"""Tasks; importing this package registers them with fairseq."""

from . import translation_struct  # noqa: F401
