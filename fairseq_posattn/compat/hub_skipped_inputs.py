"""Keep the hub's outputs in the places of its inputs when it skips some, and
skip the inputs that are no text.

fairseq 0.12's ``GeneratorHubInterface.generate`` (and fairseq-fixed
0.12.3.1's) with ``skip_invalid_size_inputs=True`` returns the outputs of the
inputs it kept, closed up: line 2 may get line 3's translation.  :func:`install`
wraps ``generate`` where it does so: the inputs the task's size filter leaves
out are found first, the others are decoded, and each skipped input gets an
empty list of hypotheses in its place (``""`` from ``sample``/``translate``),
with a warning naming its 0-based index.  It also wraps ``sample`` (under
``translate``) so that an input that is empty, blank or not UTF-8, which
fairseq translates as EOS alone or as ``<unk>``, is skipped in its place as
``fairseq-interactive`` skips it (:func:`fairseq_posattn.data.raw_text.unreadable`),
and ``encode`` so that a separator subword-nmt would keep inside a piece is
read as a space (:func:`fairseq_posattn.data.raw_text.spaces_for_separators`),
each with a warning naming the input.
"""

import functools
import inspect
import logging
from types import SimpleNamespace
from typing import List

import numpy as np
import torch

from ..data.raw_text import spaces_for_separators, unreadable
from .interactive_lines import source_positions
from .patching import wrap_once

logger = logging.getLogger(__name__)


def too_long(hub, tokens: List[torch.Tensor]) -> List[int]:
    """The indices of ``tokens`` that ``hub``'s batches would leave out."""
    lengths = torch.LongTensor([t.numel() for t in tokens])
    dataset = hub.task.build_dataset_for_inference(tokens, lengths)
    kept = hub.task.filter_indices_by_size(np.arange(len(tokens)), dataset, hub.max_positions,
                                           ignore_invalid_inputs=True)
    skipped = sorted(set(range(len(tokens))) - set(kept.tolist()))
    for i in skipped:
        logger.warning("hub input %d (0-based) has %d tokens with EOS, more than the model's %s "
                       "source positions: skipped (skip_invalid_size_inputs=True), its output "
                       "is empty", i, lengths[i], source_positions(hub.max_positions))
    return skipped


def _generate_in_place(generate):
    @functools.wraps(generate)
    def wrapper(self, tokenized_sentences, *args, skip_invalid_size_inputs=False, **kwargs):
        if not skip_invalid_size_inputs or (torch.is_tensor(tokenized_sentences)
                                            and tokenized_sentences.dim() == 1):
            return generate(self, tokenized_sentences, *args,
                            skip_invalid_size_inputs=skip_invalid_size_inputs, **kwargs)
        tokens = list(tokenized_sentences)
        skipped = set(too_long(self, tokens))
        kept = [t for i, t in enumerate(tokens) if i not in skipped]
        outputs = iter(generate(self, kept, *args, **kwargs) if kept else [])
        return [[] if i in skipped else next(outputs) for i in range(len(tokens))]

    return wrapper


def _sample_in_place(sample):
    @functools.wraps(sample)
    def wrapper(self, sentences, beam=1, verbose=False, **kwargs):
        if isinstance(sentences, str) or not kwargs.get("skip_invalid_size_inputs"):
            return sample(self, sentences, beam, verbose, **kwargs)
        outputs = self.generate([self.encode(s) for s in sentences], beam, verbose, **kwargs)
        return [self.decode(hypos[0]["tokens"]) if hypos else "" for hypos in outputs]

    return wrapper


def _text_inputs_only(sample):
    @functools.wraps(sample)
    def wrapper(self, sentences, *args, **kwargs):
        single = isinstance(sentences, str)
        inputs = [sentences] if single else list(sentences)
        problems = [unreadable(s) if isinstance(s, str) else None for s in inputs]
        for i, problem in enumerate(problems):
            if problem:
                logger.warning("hub input %d (0-based) %s %s: skipped, its output is empty",
                               i, repr(inputs[i]), problem)
        if not any(problems):
            return sample(self, sentences, *args, **kwargs)
        kept = [s for s, problem in zip(inputs, problems) if not problem]
        outputs = iter(sample(self, kept, *args, **kwargs) if kept else [])
        placed = ["" if problem else next(outputs) for problem in problems]
        return placed[0] if single else placed

    return wrapper


def _separators_as_spaces(encode):
    @functools.wraps(encode)
    def wrapper(self, sentence: str):
        text, separators = spaces_for_separators(sentence)
        if separators:
            logger.warning("hub input %s holds %s: read as a space between words",
                           repr(sentence), ", ".join(separators))
        return encode(self, text)

    return wrapper


def closes_up_outputs() -> bool:
    """True if fairseq's ``generate`` returns fewer outputs than inputs when its
    batches leave one out (probed with a stand-in hub whose batches leave out
    input 1)."""
    from fairseq.hub_utils import GeneratorHubInterface
    from omegaconf import OmegaConf

    task = SimpleNamespace(build_generator=lambda *args, **kwargs: None,
                           inference_step=lambda generator, models, batch, **kwargs:
                           [[{}] for _ in batch["id"]])
    hub = SimpleNamespace(cfg=OmegaConf.create({"generation": {}}), task=task, models=[],
                          device="cpu",
                          _build_batches=lambda tokens, skip: [{"id": torch.tensor([0, 2])}])
    generate = inspect.unwrap(GeneratorHubInterface.generate)
    outputs = generate(hub, [torch.ones(1)] * 3, skip_invalid_size_inputs=True)
    return len(outputs) < 3


def install() -> None:
    """Wrap the hub's ``generate`` and ``sample`` if ``generate`` closes up, and
    its ``sample`` and ``encode`` for the inputs that are no text (idempotent)."""
    from fairseq.hub_utils import GeneratorHubInterface

    if closes_up_outputs():
        wrap_once(GeneratorHubInterface, "generate", _generate_in_place)
        wrap_once(GeneratorHubInterface, "sample", _sample_in_place)
    wrap_once(GeneratorHubInterface, "sample", _text_inputs_only)
    wrap_once(GeneratorHubInterface, "encode", _separators_as_spaces)
