"""The fast paths of the encoder's layers, each tested against the layer's
definition: tensors in, tensors out, nothing of the rest of the package
imported.  :mod:`.manual` holds the manual's words about them; which one
runs is :mod:`fairseq_posattn.modules.kernel_choice`'s to decide; the
:mod:`.candidates` wait for a measurement.
"""
