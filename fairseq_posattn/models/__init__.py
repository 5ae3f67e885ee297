"""Model classes and named architectures; importing this package registers them with fairseq."""

from . import transformer_posattn  # noqa: F401
