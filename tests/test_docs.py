"""The documentation (README.md, docs/*.md) against the code: what a machine can check.

* Flags. In a fenced code block, a ``--flag`` on a command line (a logical line:
  ``\\``-continuations joined) of a known command must be accepted by that
  command's parser: ``fairseq-train`` / ``-generate`` / ``-interactive`` /
  ``-validate`` with ``--user-dir fairseq_posattn`` and the task, arch,
  criterion, optimizer, ... of that line (their own flags added as fairseq adds
  them, by ``options.parse_args_and_arch``), ``fairseq-preprocess``, the
  plugin's console scripts (setup.py), ``python -m fairseq_posattn.X`` and
  ``python path/to/script.py`` of this repository.  Inline code is read the
  same way.  A fragment without a command that names ``--arch A`` is checked as
  ``fairseq-train --arch A``; the values of ``*ARGS=`` / ``EXTRA=`` variables of
  a recipe line as ``fairseq-train`` flags of its ``ARCH``.  Any other flag
  (prose, comments, fragments) must be an option of at least one of those
  parsers, or of some fairseq registry entry.  Lines of other programs
  (sacrebleu, pip, pytest, ...) are not checked.
* Console scripts. Every ``fairseq-posattn-*`` named is registered in setup.py
  and answers ``--help`` with exit code 0.
* Paths. Every repository path named (``examples/...``, ``fairseq_posattn/...``,
  ``scripts/...``, ``docs/...``, ``tests/...``, ``requirements/...``) exists
  (outputs of the recipes under their default WORK excepted); every dotted
  ``fairseq_posattn.x.y`` resolves to a module or attribute; every test named
  (``test_x.py``, ``test_x.py::test_y``, or a bare ``test_y`` in inline code) is
  in tests/.  Every image and relative link resolves, and a link's #anchor names a
  heading of its page.
* Line budgets: README.md, docs/benchmarks.md at most 300 lines, docs/hybrids.md
  250 (``LINE_LIMITS``); no text cites a "SPEC" (a document that is not in the
  repository).
* The release: setup.py's version, ``fairseq_posattn.__version__`` and
  CHANGELOG.md's first entry are one; the CHANGELOG's links resolve and the
  paths it names exist, but for its table of old names.  The benchmark log
  (docs/results/benchmarks/HISTORY.md): its links resolve and every output
  under docs/results/ it cites exists.  docs/setup.md's table of repairs names
  every repair that ``fairseq_posattn.compat.install`` installs, in its order.

Every check returns all its offences as ``file:line: what``; the tests at the
end feed each check a snippet that must fail.
"""

import argparse
import contextlib
import glob
import importlib
import importlib.util
import io
import json
import logging
import os
import re
import runpy
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "fairseq_posattn"
LINE_LIMITS = {"README.md": 300, "docs/benchmarks.md": 300, "docs/hybrids.md": 250}
CHANGELOG = REPO / "CHANGELOG.md"
BENCHMARK_LOG = REPO / "docs" / "results" / "benchmarks" / "HISTORY.md"

FAIRSEQ_COMMANDS = (
    "fairseq-train", "fairseq-generate", "fairseq-interactive",
    "fairseq-preprocess", "fairseq-validate",
)
# fairseq's registries named on a command line, and their flags
REGISTRY_FLAGS = {
    "--task": "task", "--arch": "arch", "-a": "arch", "--criterion": "criterion",
    "--optimizer": "optimizer", "--lr-scheduler": "lr_scheduler", "--bpe": "bpe",
    "--tokenizer": "tokenizer", "--scoring": "scoring",
}
# programs whose flags are not this project's (their lines are not checked)
EXTERNAL_COMMANDS = {
    "sacrebleu", "pip", "pip3", "pytest", "torchrun", "curl", "wget", "iconv", "git",
    "cut", "cp", "mv", "ln", "ls", "cat", "head", "tail", "sed", "grep", "awk", "sort",
    "paste", "wc", "mkdir", "rm", "tar", "gunzip", "unzip", "perl", "nvidia-smi",
    "subword-nmt", "spm_train", "spm_encode", "sbatch", "srun", "tee", "echo", "export",
    "cd", "for", "do", "done", "while", "if", "then", "fi", "time", "nice", "env",
    "exec", "sleep", "kill", "xargs", "which", "diff", "cmp", "du", "df", "source",
    "fairseq-hydra-train",  # hydra's --config-dir/--config-name; tests/test_hydra.py runs the configs
}
PYTHONS = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")
SHELLS = {"bash", "sh"}
# recipe variables that hold fairseq-train flags
ARGS_VARIABLE = re.compile(r"^(?:[A-Z_]*ARGS|EXTRA)$")
# outputs of the recipes under their default WORK: named, not committed
GENERATED = ("examples/*/work", "examples/*/work/**",
             "docs/results/multi30k")  # EXPORT_DIR of examples/multi30k_en_de/ablation.sh

FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]")
CONSOLE_SCRIPT = re.compile(r"(?<![\w-])fairseq-posattn-[a-z0-9]+(?:-[a-z0-9]+)*")
REPO_PATH = re.compile(
    r"(?<![\w./$~-])((?:examples|fairseq_posattn|scripts|docs|tests|requirements)"
    r"/[\w./*-]*[\w*])")
DOTTED = re.compile(r"(?<![\w./-])fairseq_posattn(?:\.[A-Za-z_]\w*)+")
TEST_NODE = re.compile(r"(?<![\w/.-])(?:tests/)?(test_\w+\.py)(?:::(test_\w+))?")
BARE_TEST = re.compile(r"^(test_[a-z]\w*)(?:\[[^\]]*\])?$")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
INLINE = re.compile(r"(`+)(.+?)\1")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
SPEC = re.compile(r"\bSPEC\b")


@dataclass
class Offence:
    file: str
    line: int
    what: str

    def __str__(self):
        return f"{self.file}:{self.line}: {self.what}"


def report(offences: Sequence[Offence]) -> str:
    return "\n" + "\n".join(str(o) for o in offences)


# ---- reading markdown ----------------------------------------------------------------

@dataclass
class Span:
    """A piece of a document: a logical line of a fenced block, an inline code span, or prose."""

    kind: str  # "block" | "inline" | "prose"
    text: str
    line: int  # 1-based line of its first character
    lines: List[str] = field(default_factory=list)  # physical lines (blocks)
    lang: str = ""


def spans(text: str) -> List[Span]:
    out: List[Span] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            marker, lang = fence.group(1), fence.group(2).lower()
            i += 1
            heredoc_end = None
            while i < len(lines) and not lines[i].strip().startswith(marker):
                start, physical = i, [lines[i]]
                while physical[-1].rstrip().endswith("\\") and i + 1 < len(lines) \
                        and not lines[i + 1].strip().startswith(marker):
                    i += 1
                    physical.append(lines[i])
                i += 1
                logical = " ".join(p.rstrip().rstrip("\\") for p in physical)
                if heredoc_end is not None:  # the text of a here-document is not shell
                    if logical.strip() == heredoc_end:
                        heredoc_end = None
                    continue
                out.append(Span("block", logical, start + 1, physical, lang))
                here = HEREDOC.search(logical)
                if here and lang not in ("python", "py", "text", "json"):
                    heredoc_end = here.group(1)
            i += 1  # the closing fence
            continue
        line = lines[i]
        for m in INLINE.finditer(line):
            out.append(Span("inline", m.group(2), i + 1))
        out.append(Span("prose", INLINE.sub(" ", line), i + 1))
        i += 1
    return out


def physical_line(span: Span, needle: str) -> int:
    for k, text in enumerate(span.lines):
        if needle in text:
            return span.line + k
    return span.line


def split_comment(line: str) -> Tuple[str, str]:
    """``(code, comment)`` of a shell line: ``#`` at a word start, outside quotes."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k], line[k:]
    return line, ""


def shell_segments(code: str) -> List[List[str]]:
    """The simple commands of a shell line, as token lists."""
    try:
        lexer = shlex.shlex(code, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: read it word by word
        tokens = code.split()
    segments, current = [], []
    for token in tokens:
        if token and all(ch in "();<>|&" for ch in token):
            if current:
                segments.append(current)
            current = []
            if ">" in token or "<" in token:
                current = ["<redirect>"]
        else:
            current.append(token)
    if current:
        segments.append(current)
    return segments


# ---- what the commands accept --------------------------------------------------------

def setup_console_scripts(setup_text: Optional[str] = None) -> Dict[str, str]:
    """``{name: "module:function"}`` of setup.py's console scripts."""
    if setup_text is None:
        setup_text = (REPO / "setup.py").read_text()
    return dict(re.findall(r"[\"'](fairseq-posattn-[\w-]+)\s*=\s*([\w.]+:\w+)[\"']", setup_text))


def option_strings(parser: argparse.ArgumentParser) -> Set[str]:
    strings = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                strings |= option_strings(sub)
    return strings


@dataclass
class CommandOptions:
    options: Set[str]
    # flags it does not know itself go on to fairseq-train (parse_known_args)
    passes_to_fairseq_train: bool = False
    error: Optional[str] = None


@contextlib.contextmanager
def quiet():
    level = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(level)


def capture_parsers(run, prog: str) -> CommandOptions:
    """The options of every parser ``run()`` parses with when called as ``prog --help``."""
    calls: List[Tuple[str, argparse.ArgumentParser]] = []
    parse_args, parse_known = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args

    def spy_args(self, *a, **k):
        calls.append(("args", self))
        return parse_args(self, *a, **k)

    def spy_known(self, *a, **k):
        calls.append(("known", self))
        return parse_known(self, *a, **k)

    argv, error = sys.argv, None
    argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = spy_args, spy_known
    sys.argv = [prog, "--help"]
    try:
        with quiet():
            run()
    except SystemExit:
        pass
    except Exception as exc:  # noqa: BLE001 - reported as the command's problem
        error = f"{type(exc).__name__}: {exc}"
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = parse_args, parse_known
        sys.argv = argv
    own = [p for _, p in calls if set(p._option_string_actions) - {"--user-dir"}]
    if not own and error is None:
        error = "parses no arguments with --help"
    strings: Set[str] = set()
    for parser in own:
        strings |= option_strings(parser)
    by_args = {id(p) for how, p in calls if how == "args"}
    passes = bool(own) and id(own[0]) not in by_args
    return CommandOptions(strings, passes, error)


class Commands:
    """The parsers of the documented commands, built on demand and cached."""

    def __init__(self):
        import fairseq_posattn  # noqa: F401 - registers the plugin's tasks, models, ...
        from fairseq import options

        self.options = options
        self.console_scripts = setup_console_scripts()
        self._cache: Dict[Tuple, CommandOptions] = {}
        self._anywhere: Optional[Set[str]] = None

    # fairseq's own command-line tools, with the registries named on the line
    def fairseq(self, command: str, choices: Dict[str, str]) -> CommandOptions:
        key = ("fairseq", command, tuple(sorted(choices.items())))
        if key not in self._cache:
            self._cache[key] = self._fairseq(command, choices)
        return self._cache[key]

    def _fairseq(self, command, choices) -> CommandOptions:
        o = self.options
        if command == "fairseq-preprocess":
            return CommandOptions(option_strings(o.get_preprocessing_parser()))
        parser = {
            "fairseq-train": o.get_training_parser,
            "fairseq-generate": o.get_generation_parser,
            "fairseq-interactive": o.get_interactive_generation_parser,
            "fairseq-validate": o.get_validation_parser,
        }[command]()
        argv = ["DATA", "--user-dir", str(USER_DIR)]
        for flag, name in REGISTRY_FLAGS.items():
            if flag.startswith("--") and name in choices:
                argv += [flag, choices[name]]
        if command == "fairseq-train" and "arch" not in choices:
            return CommandOptions(set(), error="names no --arch")
        try:
            with quiet():
                o.parse_args_and_arch(parser, argv, parse_known=True)
        except (SystemExit, Exception):  # argparse exits on an unknown choice
            named = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(choices.items()))
            return CommandOptions(set(), error=f"fairseq refuses {named}")
        return CommandOptions(option_strings(parser))

    # the plugin's console scripts, python -m fairseq_posattn.X, python path.py
    def console_script(self, name: str) -> CommandOptions:
        key = ("script", name)
        if key not in self._cache:
            target = self.console_scripts.get(name)
            if target is None:
                self._cache[key] = CommandOptions(set(), error="is not a console script of setup.py")
            else:
                module, function = target.split(":")
                self._cache[key] = self._call(lambda: getattr(importlib.import_module(module), function)(), name)
        return self._cache[key]

    def module(self, name: str) -> CommandOptions:
        key = ("module", name)
        if key not in self._cache:
            def run():
                mod = importlib.import_module(name)
                entry = getattr(mod, "cli_main", None) or getattr(mod, "main", None)
                if entry is None:
                    raise RuntimeError("has no cli_main or main")
                entry()
            try:
                found = importlib.util.find_spec(name) is not None
            except ModuleNotFoundError:
                found = False
            self._cache[key] = (self._call(run, name) if found
                                else CommandOptions(set(), error="no such module"))
        return self._cache[key]

    def script(self, path: str) -> CommandOptions:
        key = ("path", path)
        if key not in self._cache:
            full = REPO / path
            self._cache[key] = (self._call(lambda: runpy.run_path(str(full), run_name="__main__"), path)
                                if full.is_file() else CommandOptions(set(), error="no such file"))
        return self._cache[key]

    @staticmethod
    def _call(run, prog) -> CommandOptions:
        return capture_parsers(run, prog)

    def anywhere(self) -> Set[str]:
        """Every option of fairseq's tools, of every registry entry, and of every command seen."""
        if self._anywhere is None:
            self._anywhere = self._fairseq_everything()
            for name in self.console_scripts:
                self._anywhere |= self.console_script(name).options
        strings = set(self._anywhere)
        for result in self._cache.values():
            strings |= result.options
        return strings

    def _fairseq_everything(self) -> Set[str]:
        from fairseq.dataclass.utils import gen_parser_from_dataclass
        from fairseq.models import MODEL_REGISTRY
        from fairseq.registry import REGISTRIES
        from fairseq.tasks import TASK_REGISTRY

        o = self.options
        strings: Set[str] = set()
        for make in (o.get_training_parser, o.get_generation_parser, o.get_interactive_generation_parser,
                     o.get_preprocessing_parser, o.get_validation_parser, o.get_eval_lm_parser):
            strings |= option_strings(make())
        classes = list(MODEL_REGISTRY.values()) + list(TASK_REGISTRY.values())
        for registry in REGISTRIES.values():
            classes += list(registry["registry"].values())
        for cls in classes:
            parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
            try:
                if hasattr(cls, "add_args"):
                    cls.add_args(parser)
                elif getattr(cls, "__dataclass", None) is not None:
                    gen_parser_from_dataclass(parser, cls.__dataclass())
            except Exception:  # noqa: BLE001 - an entry fairseq cannot describe adds nothing
                continue
            strings |= option_strings(parser)
        return strings


# ---- check: flags --------------------------------------------------------------------

@dataclass
class Invocation:
    """A command and the tokens after it."""

    kind: str  # "fairseq" | "script" | "module" | "path" | "external" | "none"
    name: str
    args: List[str]


def find_command(tokens: List[str]) -> Invocation:
    """The known command in a simple command's tokens (after variables and wrappers)."""
    words = [t for t in tokens if not re.match(r"^[A-Za-z_]\w*=", t)]
    for k, token in enumerate(words):
        base = token.rsplit("/", 1)[-1]
        if base in FAIRSEQ_COMMANDS:
            return Invocation("fairseq", base, words[k + 1:])
        if base.startswith("fairseq-posattn-"):
            return Invocation("script", base, words[k + 1:])
        if PYTHONS.match(token):
            rest = words[k + 1:]
            while rest and rest[0] in ("-u", "-B", "-O", "-X"):
                rest = rest[1:]
            if len(rest) >= 2 and rest[0] == "-m":
                if rest[1].split(".")[0] == "fairseq_posattn":
                    return Invocation("module", rest[1], rest[2:])
                return Invocation("external", rest[1], rest[2:])
            if rest and rest[0].endswith(".py") and not rest[0].startswith("/"):
                return Invocation("path", rest[0], rest[1:])
            return Invocation("external", "python", rest)
    if not words or words[0] == "<redirect>":
        return Invocation("none", "", words)
    first = words[0].rsplit("/", 1)[-1]
    if first in SHELLS or first in EXTERNAL_COMMANDS or first.startswith("$"):
        return Invocation("external", first, words[1:])
    return Invocation("none", "", words)


def registry_choices(tokens: Sequence[str]) -> Dict[str, str]:
    choices = {}
    for k, token in enumerate(tokens):
        flag, eq, value = token.partition("=")
        if flag in REGISTRY_FLAGS:
            if eq:
                choices[REGISTRY_FLAGS[flag]] = value
            elif k + 1 < len(tokens):
                choices[REGISTRY_FLAGS[flag]] = tokens[k + 1]
    return choices


def flags_in(tokens: Iterable[str]) -> List[str]:
    found = []
    for token in tokens:
        m = FLAG.match(token)
        if m and token.startswith("--"):
            found.append(m.group(0))
    return found


class FlagChecker:
    def __init__(self, commands: Commands):
        self.commands = commands

    def accepted(self, invocation: Invocation) -> Tuple[Optional[CommandOptions], str]:
        c = self.commands
        if invocation.kind == "fairseq":
            return c.fairseq(invocation.name, registry_choices(invocation.args)), invocation.name
        if invocation.kind == "script":
            return c.console_script(invocation.name), invocation.name
        if invocation.kind == "module":
            return c.module(invocation.name), f"python -m {invocation.name}"
        if invocation.kind == "path":
            return c.script(invocation.name), f"python {invocation.name}"
        return None, ""

    def train_flags(self, choices: Dict[str, str]) -> CommandOptions:
        return self.commands.fairseq("fairseq-train", choices)

    def check_command(self, tokens: List[str], where) -> List[Offence]:
        out: List[Offence] = []
        invocation = find_command(tokens)
        variables = dict(t.split("=", 1) for t in tokens if re.match(r"^[A-Za-z_]\w*=", t))
        for name, value in variables.items():  # ARCH_ARGS="--relative-positions" ...
            if ARGS_VARIABLE.match(name):
                choices = {"arch": variables["ARCH"]} if variables.get("ARCH") else {}
                if choices:
                    choices["task"] = "translation_struct"
                out += self.check_against(flags_in(shlex.split(value)), choices, f"fairseq-train ({name})", where)
        if invocation.kind == "external":
            return out
        if invocation.kind == "none":
            choices = registry_choices(invocation.args)
            if "arch" in choices:
                out += self.check_against(flags_in(invocation.args), choices,
                                          "fairseq-train --arch " + choices["arch"], where)
            else:
                out += self.anywhere(flags_in(invocation.args), where)
            return out
        flags = flags_in(invocation.args)
        if not flags:
            return out
        accepted, label = self.accepted(invocation)
        if accepted.error and not accepted.options:
            if invocation.kind == "fairseq" and accepted.error == "names no --arch":
                return out + self.anywhere(flags, where)
            return out + [where(label, f"`{label}` {accepted.error}")]
        for flag in flags:
            if flag in accepted.options:
                continue
            if accepted.passes_to_fairseq_train:  # e.g. fairseq-posattn-param-count --arch A ...
                train = self.train_flags(registry_choices(invocation.args))
                if flag in train.options or (train.error and flag in self.commands.anywhere()):
                    continue
            out.append(where(flag, f"`{flag}` is not an option of `{label}`"))
        return out

    def check_against(self, flags, choices, label, where) -> List[Offence]:
        if not choices:
            return self.anywhere(flags, where)
        accepted = self.train_flags(choices)
        if accepted.error:
            return [where(choices.get("arch", ""), f"`{label}`: {accepted.error}")]
        return [where(f, f"`{f}` is not an option of `{label}`") for f in flags if f not in accepted.options]

    def anywhere(self, flags, where) -> List[Offence]:
        known = self.commands.anywhere()
        return [where(f, f"`{f}` is not an option of any documented command or fairseq registry entry")
                for f in flags if f not in known]

    def check(self, name: str, text: str) -> List[Offence]:
        out: List[Offence] = []
        for span in spans(text):
            def where(needle, what, span=span):
                line = physical_line(span, needle) if span.kind == "block" else span.line
                return Offence(name, line, what)

            if span.kind == "prose":
                out += self.anywhere(FLAG.findall(span.text), where)
            elif span.kind == "block" and span.lang in ("python", "py", "text", "json", "console"):
                out += self.anywhere(FLAG.findall(span.text), where)
            else:
                code, comment = split_comment(span.text)
                out += self.anywhere(FLAG.findall(comment), where)
                for tokens in shell_segments(code):
                    out += self.check_command(tokens, where)
        return out


# ---- check: console scripts ----------------------------------------------------------

def named_console_scripts(text: str) -> List[Tuple[int, str]]:
    return [(k + 1, m.group(0)) for k, line in enumerate(text.split("\n"))
            for m in CONSOLE_SCRIPT.finditer(line)]


def check_console_scripts(name: str, text: str, registered: Dict[str, str]) -> List[Offence]:
    return [Offence(name, line, f"`{script}` is not a console script of setup.py")
            for line, script in named_console_scripts(text) if script not in registered]


# ---- check: paths, modules, tests, images, links ---------------------------------------

def generated(path: str) -> bool:
    from fnmatch import fnmatch
    return any(fnmatch(path, pattern) for pattern in GENERATED)


def path_exists(path: str, root: Path) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(glob.glob(str(root / path), recursive=True))
    return (root / path).exists()


def dotted_resolves(name: str) -> bool:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        module_name = ".".join(parts[:k])
        try:
            obj = importlib.import_module(module_name)
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a module that fails to import resolves nothing
            return False
        for attribute in parts[k:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def suite_tests(root: Path) -> Dict[str, Set[str]]:
    """``{file name: test functions}`` of the test suite."""
    return {p.name: set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)", p.read_text(), re.M))
            for p in sorted((root / "tests").glob("test_*.py"))}


def old_name_lines(text: str) -> Set[int]:
    """The lines between ``<!-- old names -->`` and ``<!-- /old names -->``: a
    table of what was renamed names the old paths and modules on purpose."""
    lines, inside = set(), False
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip() == "<!-- old names -->":
            inside = True
        elif line.strip() == "<!-- /old names -->":
            inside = False
        elif inside:
            lines.add(number)
    return lines


def missing_paths(name: str, span: Span, root: Path, prefix: str = "") -> List[Offence]:
    """The repository paths (starting with ``prefix``) that a span names and that do not exist."""
    out = []
    for m in REPO_PATH.finditer(span.text):
        path = m.group(1).rstrip(".")
        if path.startswith(prefix) and not path_exists(path, root) and not generated(path):
            line = physical_line(span, path) if span.kind == "block" else span.line
            out.append(Offence(name, line, f"`{path}` does not exist in the repository"))
    return out


def check_paths(name: str, text: str, root: Path = REPO) -> List[Offence]:
    out: List[Offence] = []
    tests = suite_tests(root)
    all_tests = set().union(*tests.values()) if tests else set()
    old_names = old_name_lines(text)
    for span in spans(text):
        if span.line in old_names:
            continue
        where = (lambda needle, span=span: physical_line(span, needle) if span.kind == "block" else span.line)
        body = span.text
        out += missing_paths(name, span, root)
        for m in DOTTED.finditer(body):
            dotted = m.group(0).rstrip(".")
            if not dotted_resolves(dotted):
                out.append(Offence(name, where(dotted), f"`{dotted}` is not a module or attribute"))
        if span.kind == "block":
            continue
        for m in TEST_NODE.finditer(body):
            file, function = m.group(1), m.group(2)
            if file not in tests:
                out.append(Offence(name, span.line, f"`{file}` is not in tests/"))
            elif function and function not in tests[file]:
                out.append(Offence(name, span.line, f"`{file}` has no `{function}`"))
        if span.kind == "inline":
            bare = BARE_TEST.match(body.strip())
            if bare and bare.group(1) not in all_tests:
                out.append(Offence(name, span.line, f"no test `{bare.group(1)}` in tests/"))
    return out


def check_cited_outputs(name: str, text: str, root: Path = REPO) -> List[Offence]:
    """Every output under docs/results/ that a text names exists (a log also names code that is gone)."""
    return [o for span in spans(text) for o in missing_paths(name, span, root, prefix="docs/results/")]


HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$")


def heading_anchors(text: str) -> Set[str]:
    """The anchors GitHub gives a Markdown text's headings (a repeated one gets -1, -2, ...)."""
    anchors: Set[str] = set()
    in_fence = False
    for line in text.split("\n"):
        if FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else HEADING.match(line)
        if heading:
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            anchor, n = slug, 0
            while anchor in anchors:
                n += 1
                anchor = f"{slug}-{n}"
            anchors.add(anchor)
    return anchors


def check_links(name: str, text: str, base: Path) -> List[Offence]:
    """Every relative link and image resolves, and a link's #anchor names a heading of its page."""
    out: List[Offence] = []
    for span in spans(text):
        if span.kind != "prose":
            continue
        # links are read on the line as written (inline code was blanked out)
        for pattern, what in ((IMAGE, "image"), (LINK, "link")):
            for m in pattern.finditer(span.text):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                path, _, anchor = target.partition("#")
                if path and not (base / path).exists():
                    out.append(Offence(name, span.line, f"{what} `{target}` does not resolve"))
                elif anchor and (not path or path.endswith(".md")):
                    page = (base / path).read_text() if path else text
                    if anchor not in heading_anchors(page):
                        out.append(Offence(name, span.line, f"{what} `{target}`: no heading has the anchor `#{anchor}`"))
    return out


ARCH_HEADERS = {"`--arch`", "arch", "`ARCH=`", "`ARCH=` / `ARCH_ARGS=`"}


def table_cells(line: str) -> List[str]:
    """The cells of a Markdown table row (pipes inside inline code do not split)."""
    cells, current, in_code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += ch
    cells.append(current.strip())
    return cells


def check_arch_tables(name: str, text: str, archs: Set[str]) -> List[Offence]:
    """In a table column headed `--arch`, arch or `ARCH=`, every inline code that
    starts with a name must start with a registered architecture."""
    out: List[Offence] = []
    lines = text.split("\n")
    in_fence, column = False, None
    for k, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or not line.lstrip().startswith("|"):
            column = None
            continue
        cells = table_cells(line)
        if column is None:
            is_header = k + 1 < len(lines) and re.match(r"^\s*\|?\s*:?-{3,}", lines[k + 1])
            column = next((i for i, c in enumerate(cells) if c in ARCH_HEADERS), -1) if is_header else -1
            continue
        if column < 0 or column >= len(cells) or set(cells[column]) <= set("-: "):
            continue
        for m in INLINE.finditer(cells[column]):
            word = m.group(2).split()[0] if m.group(2).split() else ""
            if re.match(r"^[a-z][a-z0-9_]*$", word) and word not in archs:
                out.append(Offence(name, k + 1, f"`{word}` is not a registered architecture"))
    return out


def check_repairs_table(name: str, text: str, repairs: Sequence[str]) -> List[Offence]:
    """The table whose first column is headed ``module`` lists ``repairs``, in that order."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if line.lstrip().startswith("|") and table_cells(line)[0] == "module":
            listed = []
            for row in lines[k + 2:]:
                if not row.lstrip().startswith("|"):
                    break
                listed.append(table_cells(row)[0].strip("`"))
            if listed != list(repairs):
                return [Offence(name, k + 1, f"the repairs table lists {listed}, "
                                             f"fairseq_posattn.compat.install installs {list(repairs)}")]
            return []
    return [Offence(name, 1, "no table headed `module` (the repairs)")]


def installed_repairs() -> List[str]:
    """The repairs ``fairseq_posattn.compat.install`` installs, in its order (its ``name.install()`` calls)."""
    import inspect

    from fairseq_posattn import compat
    return re.findall(r"^\s+(\w+)\.install\(\)", inspect.getsource(compat.install), re.M)


CHANGELOG_ENTRY = re.compile(r"^## (\d+\.\d+\.\d+)\b", re.M)


def changelog_version(text: str) -> Optional[str]:
    """The version of a CHANGELOG's first (newest) entry."""
    m = CHANGELOG_ENTRY.search(text)
    return m.group(1) if m else None


def setup_version() -> str:
    """The version setup.py gives setuptools (setup.py run with ``setup`` recorded, not run)."""
    import setuptools

    given, real = {}, setuptools.setup
    setuptools.setup = lambda **kwargs: given.update(kwargs)
    try:
        runpy.run_path(str(REPO / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = real
    return given["version"]


def check_citations(name: str, text: str) -> List[Offence]:
    return [Offence(name, k + 1, "cites a SPEC, which is not in the repository: cite the paper")
            for k, line in enumerate(text.split("\n")) if SPEC.search(line)]


def check_length(name: str, text: str, limit: int) -> List[Offence]:
    lines = len(text.rstrip("\n").split("\n"))
    return [Offence(name, lines, f"has {lines} lines, more than {limit}")] if lines > limit else []


# The newcomer test: each concept reached from README.md by opening at most three files, README,
# the page it links and the module that page's "Where it lives:" paragraph names, which holds the concept.
CONCEPTS = {  # concept: (its page, its module, what the module holds)
    "Shaw's value term": ("docs/architectures.md", "fairseq_posattn/modules/relative_positions.py",
                          "class RelativeValues"),
    "the kernel choice": ("docs/architectures.md", "fairseq_posattn/modules/kernel_choice.py",
                          "def attention_kernel"),
    "Wang's structural relative rule": ("docs/structure.md", "fairseq_posattn/structure/tree.py",
                                        "def relative_structural_positions"),
    "trees from preprocess to batch": ("docs/structure.md", "fairseq_posattn/data/tree_files.py",
                                       "class TreeFileWriter"),
    "the ON-LSTM's cumax master gates": ("docs/hybrids.md", "fairseq_posattn/modules/onlstm_reference.py",
                                         "def cumax"),
    "Hao's short-cut, Eq. 10": ("docs/hybrids.md", "fairseq_posattn/models/encoder.py", "Eq. 10"),
    "how a hydra option is typed and checked": ("docs/setup.md", "fairseq_posattn/config_check.py",
                                                "def check_options"),
    "how a checkpoint restores input-reading options": ("docs/reliability.md",
                                                        "fairseq_posattn/tasks/input_options.py",
                                                        "class RemembersInputOptions"),
}
WHERE = "Where it lives:"


def where_it_lives(text: str) -> str:
    """The page's paragraphs that start with ``Where it lives:``, joined."""
    return "\n".join(paragraph for paragraph in re.split(r"\n\s*\n", text) if paragraph.startswith(WHERE))


def check_newcomer_paths(concepts: Dict[str, Tuple[str, str, str]], root: Path = REPO) -> List[Offence]:
    """Each concept's page is linked from README.md, names its module where it says where things live,
    and the module holds what the concept names."""
    readme, out = (root / "README.md").read_text(), []
    for concept, (page, module, holds) in concepts.items():
        if f"]({page}" not in readme:
            out.append(Offence("README.md", 1, f"links no {page} ({concept})"))
        if f"`{module}`" not in where_it_lives((root / page).read_text()):
            out.append(Offence(page, 1, f"its {WHERE!r} paragraph names no `{module}` ({concept})"))
        if holds not in (root / module).read_text():
            out.append(Offence(module, 1, f"holds no {holds!r} ({concept})"))
    return out


# ---- the documents -------------------------------------------------------------------

def documents() -> List[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.fixture(scope="module")
def commands():
    return Commands()


@pytest.fixture(scope="module")
def flag_checker(commands):
    return FlagChecker(commands)


def test_docs_exist():
    names = [rel(p) for p in documents()]
    assert "README.md" in names and len(names) > 1, names


def test_flags_exist(flag_checker):
    offences = [o for p in documents() for o in flag_checker.check(rel(p), p.read_text())]
    assert not offences, report(offences)


def test_console_scripts_are_registered():
    registered = setup_console_scripts()
    offences = [o for p in documents() for o in check_console_scripts(rel(p), p.read_text(), registered)]
    assert not offences, report(offences)


# Calls every console script's function with --help in one interpreter (torch
# and fairseq are imported once) and reports the ones that fail.
HELP_DRIVER = """
import contextlib, importlib, io, json, sys
failures = []
for name, target in json.loads(sys.argv[1]):
    module, function = target.split(":")
    sys.argv = [name, "--help"]
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            getattr(importlib.import_module(module), function)()
        code = "no exit"
    except SystemExit as exc:
        code = exc.code or 0
    except Exception as exc:
        code = repr(exc)
    if code != 0 or "usage:" not in output.getvalue():
        failures.append(f"`{name} --help` ended with {code}:\\n{output.getvalue()[-2000:]}")
print(json.dumps(failures))
"""


@pytest.mark.slow
def test_console_scripts_answer_help():
    """Every console script the docs name is installed and answers --help with its usage."""
    registered = setup_console_scripts()
    named = sorted({s for p in documents() for _, s in named_console_scripts(p.read_text())} & set(registered))
    installed = Path(sys.executable).parent
    if (installed / "fairseq-posattn-parse").exists():  # the package is installed: so is every script
        assert [name for name in named if not (installed / name).exists()] == []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", HELP_DRIVER, json.dumps([(n, registered[n]) for n in named])],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(named) > 20 and not failures, "\n".join(failures)


def registered_archs() -> Set[str]:
    import fairseq_posattn  # noqa: F401
    from fairseq.models import ARCH_MODEL_REGISTRY
    return set(ARCH_MODEL_REGISTRY)


def test_architecture_tables_name_registered_archs():
    archs = registered_archs()
    offences = [o for p in documents() for o in check_arch_tables(rel(p), p.read_text(), archs)]
    assert not offences, report(offences)


def test_paths_exist():
    offences = [o for p in documents() for o in check_paths(rel(p), p.read_text())]
    assert not offences, report(offences)


def test_images_and_links_resolve():
    offences = [o for p in documents() for o in check_links(rel(p), p.read_text(), p.parent)]
    assert not offences, report(offences)


def test_pages_keep_their_line_budgets():
    offences = [o for name, limit in LINE_LIMITS.items() for o in check_length(name, (REPO / name).read_text(), limit)]
    assert not offences, report(offences)


def test_no_spec_citations():
    offences = [o for p in documents() for o in check_citations(rel(p), p.read_text())]
    assert not offences, report(offences)


def test_one_version_in_setup_the_package_and_the_changelog():
    import fairseq_posattn
    assert setup_version() == fairseq_posattn.__version__ == changelog_version(CHANGELOG.read_text())


def test_changelog_links_and_paths():
    text = CHANGELOG.read_text()
    offences = check_links("CHANGELOG.md", text, REPO) + check_paths("CHANGELOG.md", text)
    assert not offences, report(offences)


def test_benchmark_log_links_and_outputs():
    name, text = rel(BENCHMARK_LOG), BENCHMARK_LOG.read_text()
    offences = check_links(name, text, BENCHMARK_LOG.parent) + check_cited_outputs(name, text)
    assert not offences, report(offences)


def test_a_newcomer_reaches_each_concept_in_three_files():
    offences = check_newcomer_paths(CONCEPTS)
    assert not offences, report(offences)


def test_setup_lists_every_repair():
    offences = check_repairs_table("docs/setup.md", (REPO / "docs" / "setup.md").read_text(), installed_repairs())
    assert not offences, report(offences)


def test_readme_workflows_give_an_absolute_user_dir_and_parse_every_split_they_binarize():
    """A relative --user-dir works only from the checkout root; fairseq-generate
    decodes the test split, which translation_struct reads only with its trees."""
    segments = [segment for span in spans((REPO / "README.md").read_text()) if span.kind == "block"
                for segment in shell_segments(split_comment(span.text)[0])]
    user_dirs = [segment[k + 1] for segment in segments for k, token in enumerate(segment[:-1])
                 if token == "--user-dir"]
    user_dirs += [token.split("=", 1)[1] for segment in segments for token in segment
                  if token.startswith("common.user_dir=")]
    assert user_dirs and all(d.startswith(("/", "$")) for d in user_dirs), user_dirs
    (loop,) = [segment for segment in segments if segment[:3] == ["for", "split", "in"]]
    (binarize,) = [segment for segment in segments if segment[0] == "fairseq-posattn-preprocess"]
    binarized = {flag[2:-len("pref")] for flag in binarize if flag.endswith("pref")}
    assert set(loop[3:]) == binarized == {"train", "valid", "test"}


# ---- each check can fail -------------------------------------------------------------

FENCE3 = "```"

BAD_FLAGS = {
    "unknown flag of fairseq-train": (
        f"text\n\n{FENCE3}\nfairseq-train data-bin --user-dir fairseq_posattn --arch transformer_posattn \\\n"
        f"    --no-such-flag 3\n{FENCE3}\n", 5, "--no-such-flag"),
    "a flag of another command": (
        f"{FENCE3}\nfairseq-generate data-bin --user-dir fairseq_posattn --path x.pt --max-update 3\n{FENCE3}\n",
        2, "--max-update"),
    "a flag of another arch": (
        f"{FENCE3}\nfairseq-train data --user-dir fairseq_posattn --arch transformer --relative-positions\n"
        f"{FENCE3}\n", 2, "--relative-positions"),
    "a task flag without its task": (
        f"{FENCE3}\nfairseq-train data --user-dir fairseq_posattn --task translation "
        f"--arch transformer_struct --structural-relative-rule text\n{FENCE3}\n", 2, "--structural-relative-rule"),
    "unknown arch": (
        f"{FENCE3}\nfairseq-train data --user-dir fairseq_posattn --arch transformer_nonesuch\n{FENCE3}\n",
        2, "transformer_nonesuch"),
    "unknown flag of a console script": (
        f"{FENCE3}\nfairseq-posattn-parse --input a --output b --no-such-option\n{FENCE3}\n",
        2, "--no-such-option"),
    "a python module that is gone": (
        f"{FENCE3}\npython -m fairseq_posattn.no_such_module --xy 1\n{FENCE3}\n", 2, "no such module"),
    "a recipe variable with a flag the arch does not have": (
        f"{FENCE3}\nARCH=transformer ARCH_ARGS=\"--structural-relative-positions\" "
        f"bash examples/multi30k_en_de/run.sh\n{FENCE3}\n", 2, "--structural-relative-positions"),
    "a fragment with an arch": (
        "use `--arch transformer_posattn --encoder-recurrent-layerz 2`\n", 1, "--encoder-recurrent-layerz"),
    "a flag in prose": ("add --bogus-flag to the command line\n", 1, "--bogus-flag"),
    "a flag in a comment": (f"{FENCE3}\n# then --bogus-comment-flag\n{FENCE3}\n", 2, "--bogus-comment-flag"),
}


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_flag_check_reports(flag_checker, case):
    text, line, needle = BAD_FLAGS[case]
    offences = flag_checker.check("fake.md", text)
    assert [o.line for o in offences if needle in o.what] == [line], report(offences)


def test_flag_check_accepts_real_flags(flag_checker):
    text = (f"{FENCE3}\nfairseq-train data-bin --user-dir fairseq_posattn --task translation_struct \\\n"
            f"    --arch transformer_struct --structural-relative-rule text \\\n"
            f"    --optimizer adam --adam-betas '(0.9, 0.98)' --criterion label_smoothed_cross_entropy \\\n"
            f"    --label-smoothing 0.1 --lr-scheduler inverse_sqrt --warmup-updates 4000\n"
            f"sacrebleu ref.de -i a.hyp b.hyp --paired-bs   # not ours\n{FENCE3}\n"
            "Prose may name `--max-relative-position` and --encoder-recurrent-layers.\n")
    offences = flag_checker.check("fake.md", text)
    assert not offences, report(offences)


def test_console_script_check_reports():
    offences = check_console_scripts("fake.md", "one\nrun `fairseq-posattn-nonesuch --x`\n",
                                     {"fairseq-posattn-parse": "m:f"})
    assert [(o.line, "fairseq-posattn-nonesuch" in o.what) for o in offences] == [(2, True)]


def test_help_check_reports_a_broken_entry_point_and_one_without_usage():
    targets = [("fairseq-posattn-nonesuch", "fairseq_posattn.nonesuch:main"),
               ("fairseq-posattn-quiet", "fairseq_posattn.files:_umask")]  # returns, prints nothing
    proc = subprocess.run([sys.executable, "-c", HELP_DRIVER, json.dumps(targets)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [f.split("`")[1] for f in failures] == ["fairseq-posattn-nonesuch --help", "fairseq-posattn-quiet --help"]
    assert "ModuleNotFoundError" in failures[0] and "no exit" in failures[1]


@pytest.mark.parametrize("text, needle, line", [
    ("see `examples/nonesuch/run.sh`\n", "examples/nonesuch/run.sh", 2),
    (f"{FENCE3}\nbash scripts/nonesuch.sh\n{FENCE3}\n", "scripts/nonesuch.sh", 3),
    ("in fairseq_posattn/modules/nonesuch.py.\n", "fairseq_posattn/modules/nonesuch.py", 2),
    ("call `fairseq_posattn.modules.attention.NoSuchClass`\n", "NoSuchClass", 2),
    ("tested in `test_nonesuch.py`\n", "test_nonesuch.py", 2),
    ("tested in `test_docs.py::test_nonesuch`\n", "test_nonesuch", 2),
    ("tested by `test_nonesuch_either`\n", "test_nonesuch_either", 2),
])
def test_path_check_reports(text, needle, line):
    offences = check_paths("fake.md", "first line\n" + text)
    assert [o.line for o in offences if needle in o.what] == [line], report(offences)


def test_path_check_accepts_real_paths():
    text = ("`examples/quickstart/run.sh`, fairseq_posattn/modules/attention.py, `docs/figures/*.png`,\n"
            "`fairseq_posattn.modules.attention.PositionAwareSelfAttention`, `test_docs.py::test_paths_exist`,\n"
            "`test_pages_keep_their_line_budgets`, and the work directory `examples/quickstart/work/data-bin`.\n")
    offences = check_paths("fake.md", text)
    assert not offences, report(offences)


@pytest.mark.parametrize("text", [
    "![a figure](figures/nonesuch.png)\n",
    "see [the setup](nonesuch.md#install)\n",
    "see [the setup](setup.md#no-such-heading)\n",
    "see [a heading](#no-such-heading-here)\n",
])
def test_link_check_reports(text):
    offences = check_links("docs/fake.md", "x\n" + text, REPO / "docs")
    assert [o.line for o in offences] == [2], report(offences)


def test_link_check_accepts_real_links():
    text = ("# A page\n\n## Its `first` section: (a, b)\n\n![curves](figures/pos_tagging_curves.png) "
            "[readme](../README.md#known-limits) [web](https://x.org#y) [here](#its-first-section-a-b) "
            "[setup](setup.md#bf16)\n")
    assert not check_links("docs/fake.md", text, REPO / "docs")
    assert heading_anchors("## Same\n## Same\n```\n# not a heading\n```\n") == {"same", "same-1"}


def test_arch_table_check_reports():
    text = ("| `--arch` | encoder |\n|---|---|\n| `transformer_struct` | fine |\n"
            "| `transformer_nonesuch`, `onlstm_san_transformer --encoder-layers 2` | gone |\n\n"
            "| row | `--arch` |\n|---|---|\n| 1 | `transformer_posattn_pr`, `--relative-positions` |\n")
    offences = check_arch_tables("fake.md", text, registered_archs())
    assert [(o.line, "transformer_nonesuch" in o.what) for o in offences] == [(4, True)], report(offences)


def test_length_and_citation_checks_report():
    assert [o.line for o in check_length("README.md", "x\n" * 301, 300)] == [301]
    assert not check_length("README.md", "x\n" * 300, 300)
    assert [o.line for o in check_citations("fake.md", "a\nas SPEC 1.1 says\n")] == [2]
    assert not check_citations("fake.md", "a specification, spectral\n")


def test_release_checks_report():
    assert changelog_version("# Changelog\n\ntext\n\n## 1.2.3 (2026-01-01)\n\n## 1.2.2\n") == "1.2.3"
    assert changelog_version("# Changelog\n\n### 1.2.3\n") is None
    table = "| module | what |\n|---|---|\n| `a` | x |\n| `c` | y |\n"
    assert [o.line for o in check_repairs_table("fake.md", "x\n" + table, ["a", "b", "c"])] == [2]
    assert not check_repairs_table("fake.md", table, ["a", "c"])
    assert [o.line for o in check_repairs_table("fake.md", table, ["c", "a"])] == [1]
    text = "`docs/results/nonesuch/out.txt` and `fairseq_posattn/gone.py`\n"
    assert [o.what.split("`")[1] for o in check_cited_outputs("fake.md", text)] == ["docs/results/nonesuch/out.txt"]


def test_old_names_are_exempt_only_inside_their_markers():
    text = ("`scripts/gone.py`\n<!-- old names -->\n| `scripts/gone.py` | new |\n"
            "<!-- /old names -->\n")
    assert [o.line for o in check_paths("fake.md", text)] == [1]


def test_the_newcomer_check_reports(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "mod.py").write_text("def concept(): pass\n")
    (tmp_path / "README.md").write_text("[page](docs/page.md)\n")
    concept = {"a concept": ("docs/page.md", "mod.py", "def concept")}
    (tmp_path / "docs" / "page.md").write_text("text naming `mod.py`\n\nWhere it lives: elsewhere.\n")
    assert [o.file for o in check_newcomer_paths(concept, tmp_path)] == ["docs/page.md"]
    (tmp_path / "docs" / "page.md").write_text("text\n\nWhere it lives: `mod.py`, the\nconcept.\n")
    assert not check_newcomer_paths(concept, tmp_path)
    (tmp_path / "docs" / "other.md").write_text("Where it lives: `mod.py`.\n")
    offences = check_newcomer_paths({"gone": ("docs/other.md", "mod.py", "def gone")}, tmp_path)
    assert [o.file for o in offences] == ["README.md", "mod.py"]

