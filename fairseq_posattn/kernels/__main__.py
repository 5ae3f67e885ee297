"""``python -m fairseq_posattn.kernels``: the manual's tables of kernels (attention, recurrence, candidates)."""

from .manual import ATTENTION, RECURRENCE, markdown_table

print("\n\n".join(markdown_table(layer) for layer in (ATTENTION, RECURRENCE, None)))
