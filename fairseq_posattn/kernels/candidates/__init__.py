"""CANDIDATES: kernels tested against the same definitions as the production
ones but not yet measured where they could win; :data:`..manual.CANDIDATES`
says what measurement promotes or removes each.  No flag reaches them: the
benchmarks (run by ``scripts/gpu_check.sh``) put them in layers with
:func:`fairseq_posattn.modules.candidates.use`.
"""
