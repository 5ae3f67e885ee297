"""Benchmarks, each printing ratios against a stock baseline measured in the
same run (absolute times on shared machines mean little):

* :mod:`.models` (``fairseq-posattn-bench``): time per update, peak memory,
  inference and beam-search decoding of every encoder option against
  fairseq's stock ``transformer``;
* :mod:`.recurrent` (``fairseq-posattn-bench-recurrent``): the LSTM and
  ON-LSTM layers against ``torch.nn.LSTM``;
* :mod:`.collate` (``fairseq-posattn-bench-collate``): the tree part of the
  ``translation_struct`` collater;
* :mod:`.structure` (``fairseq-posattn-bench-structure``): the structure
  pipeline at scale beside fairseq's own preprocessing and task;
* :mod:`.compiled` (``fairseq-posattn-bench-compile``): ``torch.compile``
  against eager on a stream of fairseq-like batch shapes;
* :mod:`.verdict` (``python -m fairseq_posattn.bench.verdict DIR``): which
  candidates win and which targets hold, read from their JSON outputs;
* :mod:`.checkpoint` (``python -m fairseq_posattn.bench.checkpoint``):
  verifying a base-size checkpoint's checksums against ``torch.load`` of it.
"""
