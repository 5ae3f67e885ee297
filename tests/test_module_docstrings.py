"""Every module docstring of the package is at most 40 lines: what the module
holds and the paper's equations; the manual (docs/) holds the rest."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fairseq_posattn"
LIMIT = 40


def docstring_lines(path: Path) -> int:
    return len((ast.get_docstring(ast.parse(path.read_text()), clean=False) or "").splitlines())


def test_module_docstrings_are_at_most_40_lines():
    long = [f"{path.relative_to(PACKAGE.parent)}: {lines} lines" for path in sorted(PACKAGE.rglob("*.py"))
            for lines in [docstring_lines(path)] if lines > LIMIT]
    assert not long, "module docstrings over %d lines:\n%s" % (LIMIT, "\n".join(long))
