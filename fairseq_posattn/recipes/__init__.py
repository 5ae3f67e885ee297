"""Helpers of the shell recipes in ``examples/`` (raw parallel text to BLEU),
each a console script (docs/recipes.md): :mod:`.corpus` prepares text,
:mod:`.scoring` scores ``fairseq-generate`` output, :mod:`.checkpoint_average`
averages checkpoints, :mod:`.arch_plan` says what an architecture needs,
:mod:`.train_log` summarises a training log and :mod:`.ablation_report`
reports an ablation over seeds.
"""
