"""The PoS tagger of Dufter et al. (2020): character CNN + word features ->
attention-only residual layers with any position option -> tag classifier
(:mod:`.model`; its parts: :mod:`.word_features`, :mod:`.residual_encoder`)."""

from . import model  # noqa: F401  (registers the model and its architectures)
