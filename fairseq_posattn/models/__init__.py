"""Model classes and named architectures; importing this package registers them with fairseq."""

from . import transformer_posattn  # noqa: F401
from . import pair_classifier  # noqa: F401
from . import tagger  # noqa: F401
from . import relation  # noqa: F401
