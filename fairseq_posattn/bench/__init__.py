"""Benchmarks, each printing ratios against a baseline measured in the same
run (absolute times on shared machines mean little): :mod:`.models`,
:mod:`.recurrent`, :mod:`.collate`, :mod:`.structure` and :mod:`.compiled` are
the ``fairseq-posattn-bench*`` commands (setup.py), :mod:`.verdict` decides
what a GPU run's outputs say, :mod:`.checkpoint` times checking a checkpoint.
The manual: docs/benchmarks.md.
"""
