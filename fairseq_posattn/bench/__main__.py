"""``python -m fairseq_posattn.bench``: the same as ``fairseq-posattn-bench``."""

from .models import cli_main

cli_main()
