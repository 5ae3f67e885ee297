"""The ON-LSTM recurrence (Shen et al. 2019; Hao et al. 2019, Eq. 3-9): its one
definition (:mod:`.reference`), the fast paths tested against it (the C++
cell on the CPU, :mod:`.cpu_cell`; Triton on CUDA, :mod:`.triton_steps`, whose
steps :mod:`.cuda_graphs` replays) with the packed layout they share
(:mod:`.packed`), and the one place that chooses between them (:mod:`.kernels`)."""
