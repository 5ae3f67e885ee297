"""The fast paths of the encoder's layers, each tested against the layer's
definition, and the one place that chooses among them (:mod:`.dispatch`):
for the attention :mod:`.shaw_flash` and :mod:`.convolved_2d` (Triton); for
the ON-LSTM recurrence :mod:`.onlstm_cpp` (C++, with :mod:`.onednn`'s packed
weights) and :mod:`.onlstm_triton`, on the packed layout of
:mod:`.onlstm_packed`; what the Triton kernels share, :mod:`.triton_common`;
and :mod:`.candidates`, which wait for a measurement.
"""
