"""``python -m fairseq_posattn.kernels``: the manual's tables of the kernels (attention, recurrence, candidates)."""

from .dispatch import tables

print("\n\n".join(tables().values()))
