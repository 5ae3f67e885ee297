"""The relation classifier of Bilan & Roth (2018) with the position-aware
attention of Zhang et al. (2017) (:mod:`.model`; its parts:
:mod:`.entity_positions`, :mod:`.encoder_layer`)."""

from . import model  # noqa: F401  (registers the model and its architectures)
