"""Packaging for the fairseq_posattn plugin.

Install order matters for fairseq (see scripts/setup_env.sh): torch, numpy and
cython first, then fairseq / fairseq-fixed with ``--no-build-isolation`` (its
sdist declares torch as a build requirement, so an isolated build would fetch
a second torch), then this package.  ``bash scripts/setup_env.sh`` does all
of that.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

# the version lives in fairseq_posattn/version.py (read here without importing the package)
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (Path(__file__).parent / "fairseq_posattn" / "version.py").read_text(), re.M).group(1)

setup(
    name="fairseq_posattn",
    version=VERSION,
    description=(
        "fairseq plugin for position- and structure-aware Transformer encoders "
        "(ON-LSTM+SAN, structural positions, direct position interactions, "
        "convolved attention, relative position scores)"
    ),
    packages=find_packages(include=["fairseq_posattn", "fairseq_posattn.*"]),
    # the ON-LSTM's CPU cell, compiled by fairseq-posattn-build-cell (torch.utils.cpp_extension, with ninja)
    package_data={"fairseq_posattn.kernels": ["csrc/*.cpp"]},
    # the Pythons that scripts/python_matrix.sh sets up and tests: 3.10-3.13 (docs/setup.md)
    python_requires=">=3.10",
    install_requires=[
        # the fairseq-fixed fork of fairseq 0.12 imports as `fairseq` on Python 3.10-3.13
        # (fairseq 0.12.2 does not import on >= 3.11, and its sdist cannot build)
        "fairseq-fixed==0.12.3.1",
        # The releases the package was tested with (CPU 2.13, CUDA 2.11), a range so
        # that an installed torch (CPU or CUDA build) among them is kept.
        "torch>=2.11,<2.14",
        "ninja",
        "numpy",
        "sentencepiece",
        "subword-nmt",
        "stanza",
        "sacrebleu>=2.0",
        "conllu",
        "tqdm",
        "matplotlib",
        "sacremoses",
        "scikit-learn",
        # fairseq's --tensorboard-logdir writer; without it every fairseq import logs
        # "Please install tensorboardX" (fairseq.tasks.text_to_speech)
        "tensorboardX",
    ],
    extras_require={
        "test": ["pytest", "hypothesis", "pytest-xdist", "pytest-timeout"],
        # offline dependency parsers for fairseq-posattn-parse (stanza is a core
        # dependency); their models: requirements/parser-models.txt
        "parsers": ["spacy>=3.8,<3.9", "ufal.udpipe>=1.3,<2"],
    },
    entry_points={
        "console_scripts": [
            "fairseq-posattn-bench = fairseq_posattn.bench.models:cli_main",
            "fairseq-posattn-toy-corpus = fairseq_posattn.toy_corpus:cli_main",
            "fairseq-posattn-parse = fairseq_posattn.data.parse:cli_main",
            "fairseq-posattn-preprocess = fairseq_posattn.data.preprocess:cli_main",
            "fairseq-posattn-dump-states = fairseq_posattn.analysis.states:cli_main",
            "fairseq-posattn-probe = fairseq_posattn.analysis.probe:cli_main",
            "fairseq-posattn-bench-recurrent = fairseq_posattn.bench.recurrent:cli_main",
            "fairseq-posattn-bench-collate = fairseq_posattn.bench.collate:cli_main",
            "fairseq-posattn-bench-structure = fairseq_posattn.bench.structure:cli_main",
            "fairseq-posattn-bench-compile = fairseq_posattn.bench.compiled:cli_main",
            "fairseq-posattn-build-cell = fairseq_posattn.kernels.onlstm_cpp:build_main",
            "fairseq-posattn-param-count = fairseq_posattn.analysis.param_count:cli_main",
            "fairseq-posattn-plot-curves = fairseq_posattn.analysis.plot_curves:cli_main",
            "fairseq-posattn-plot-attention = fairseq_posattn.analysis.plot_attention:cli_main",
            "fairseq-posattn-corpus = fairseq_posattn.recipes.corpus:main",
            "fairseq-posattn-score = fairseq_posattn.recipes.scoring:main",
            "fairseq-posattn-average-checkpoints = fairseq_posattn.recipes.checkpoint_average:main",
            "fairseq-posattn-arch-plan = fairseq_posattn.recipes.arch_plan:main",
            "fairseq-posattn-train-log = fairseq_posattn.recipes.train_log:cli_main",
            "fairseq-posattn-ablation-report = fairseq_posattn.recipes.ablation_report:cli_main",
            "fairseq-posattn-pos-score = fairseq_posattn.evaluation.pos_tagging:cli_main",
            "fairseq-posattn-pos-table = fairseq_posattn.evaluation.pos_table:main",
            "fairseq-posattn-logic-report = fairseq_posattn.evaluation.logic_inference:cli_main",
            "fairseq-posattn-relation-score = fairseq_posattn.evaluation.relation_scores:cli_main",
        ],
    },
)
