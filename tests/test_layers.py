"""No import runs back up between the package's layers.

The layers, lowest first: the leaves (errors, files, figures, version: they
import nothing of the package); kernels (tensors in, tensors out); structure
(trees, beside the neural layers); modules (the layers, and the chooser of
their kernels; they name the tree inputs they read in structure's
``TreeInputs``); models; data (corpora, over structure); metrics (scores, reading
data's tags); criterions and optim; tasks and config_check (which checks the
tasks' and models' options). compat patches fairseq and may call into every
layer, but no layer imports it: only the package's ``__init__`` (which
installs it) and the tools do. The tools sit on top of everything: toy_corpus,
bench, evaluation and recipes import no other tool; analysis imports recipes
(its training-log reader), never the reverse.

Each module is parsed (``ast``, nothing imported), each of its imports of
the package mapped to a layer; an import of a layer that is not below the
importer's (or the importer's own) fails the test, listing every
``module -> imported module``. ``python tests/test_layers.py [ROOT]`` prints
those arrows for the tree at ROOT (default: this checkout).
"""

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

PACKAGE = "fairseq_posattn"
ROOT = Path(__file__).resolve().parents[1]

# layer: (its top-level modules or subpackages, the layers right below it)
LAYERS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "leaves": (("errors", "files", "figures", "version"), ()),
    "kernels": (("kernels",), ("leaves",)),
    "modules": (("modules",), ("kernels", "structure")),
    "models": (("models",), ("modules",)),
    "structure": (("structure",), ("leaves",)),
    "data": (("data",), ("structure",)),
    "metrics": (("metrics",), ("data",)),
    "criterions": (("criterions", "optim"), ("metrics", "models")),
    "tasks": (("tasks", "config_check"), ("criterions",)),
    "compat": (("compat",), ("tasks",)),
    "recipes": (("recipes",), ("compat",)),
    "analysis": (("analysis",), ("recipes",)),
    "other tools": (("toy_corpus", "bench", "evaluation"), ("compat",)),
    "package": (("__init__",), ("analysis", "other tools")),
}


def below(layer: str) -> set:
    """The layers ``layer`` may import: its own and every layer under it."""
    found, todo = {layer}, [layer]
    while todo:
        for lower in LAYERS[todo.pop()][1]:
            if lower not in found:
                found.add(lower)
                todo.append(lower)
    return found


def layer_of(module: str) -> str:
    """The layer of a dotted module name of the package."""
    top = module.split(".")[1] if "." in module else "__init__"
    layers = [name for name, (members, _) in LAYERS.items() if top in members]
    assert layers, f"{module}: no layer holds {top} (add it to LAYERS)"
    return layers[0]


def imports(root: Path) -> Iterator[Tuple[str, str]]:
    """``(module, imported module)`` for every import of the package in the package's sources under ``root``."""
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        package = parts[:-1]  # what a relative import starts from
        module = ".".join(package if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(package[: len(package) - node.level + 1]) if node.level else []
                base += node.module.split(".") if node.module else []
                names = [".".join(base)] if node.module else [".".join(base + [a.name]) for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] == PACKAGE:
                    yield module, name


def arrows_up(root: Path = ROOT) -> List[str]:
    """Every ``module -> imported module`` whose layer is not below the module's."""
    return [f"{module} -> {name}" for module, name in imports(root)
            if layer_of(name) not in below(layer_of(module))]


def test_every_module_is_in_a_layer():
    for module, name in imports(ROOT):
        layer_of(module), layer_of(name)


def test_no_import_runs_back_up_a_layer():
    arrows = arrows_up()
    assert not arrows, f"{len(arrows)} imports run back up:\n" + "\n".join(arrows)


def test_an_import_back_up_is_caught(tmp_path):
    """The check itself: a kernel importing a module is reported."""
    kernels = tmp_path / PACKAGE / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "upward.py").write_text("from ..modules.attention import PositionAwareSelfAttention\n")
    assert arrows_up(tmp_path) == [f"{PACKAGE}.kernels.upward -> {PACKAGE}.modules.attention"]


if __name__ == "__main__":
    found = arrows_up(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("\n".join(found + [f"{len(found)} imports run back up"]))
