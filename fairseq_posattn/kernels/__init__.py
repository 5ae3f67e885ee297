"""The fast paths of the encoder's layers, each tested against the layer's
definition, and the one place that chooses among them (:mod:`.dispatch`);
the :mod:`.candidates` wait for a measurement.
"""
