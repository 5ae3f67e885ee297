"""--user-dir robustness (fairseq_posattn.compat.user_dir); each case in a fresh process."""

import os
import shutil
import textwrap

import pytest

from conftest import REPO, USER_DIR, run_cli, run_python

pytestmark = pytest.mark.slow  # command lines, recipes, training

PRELUDE = textwrap.dedent("""
    import logging, sys
    from argparse import Namespace
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True)
    """)


def copy_plugin(dest_parent):
    dest = dest_parent / "fairseq_posattn"
    shutil.copytree(USER_DIR, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def test_checkout_is_what_python_imports():
    proc = run_python(PRELUDE + textwrap.dedent("""
        import fairseq_posattn
        print("PATH", list(fairseq_posattn.__path__))
        """))
    assert "PATH %r" % [str(USER_DIR)] in proc.stdout


def test_import_then_user_dir_twice_registers_once():
    proc = run_python(PRELUDE + textwrap.dedent("""
        import fairseq_posattn
        from fairseq import utils
        from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
        from fairseq.tasks import TASK_REGISTRY
        sizes = (len(ARCH_MODEL_REGISTRY), len(MODEL_REGISTRY), len(TASK_REGISTRY))
        for _ in range(2):
            utils.import_user_module(Namespace(user_dir=sys.argv[1]))
            utils.import_user_module(Namespace(user_dir=sys.argv[1] + "/"))
        assert sizes == (len(ARCH_MODEL_REGISTRY), len(MODEL_REGISTRY), len(TASK_REGISTRY))
        print("OK")
        """), USER_DIR)
    assert proc.stdout.strip().endswith("OK")


def test_user_dir_first_then_import_and_symlink(tmp_path):
    link = tmp_path / "link"
    link.mkdir()
    os.symlink(USER_DIR, link / "fairseq_posattn")
    proc = run_python(PRELUDE + textwrap.dedent("""
        from fairseq import utils
        utils.import_user_module(Namespace(user_dir=sys.argv[1]))   # as fairseq-train does
        import fairseq_posattn
        assert list(fairseq_posattn.__path__) == [sys.argv[1]], fairseq_posattn.__path__
        utils.import_user_module(Namespace(user_dir=sys.argv[1]))
        utils.import_user_module(Namespace(user_dir=sys.argv[2]))   # same dir via a symlink
        print("OK")
        """), USER_DIR, link / "fairseq_posattn")
    assert proc.stdout.strip().endswith("OK")


@pytest.mark.parametrize("first", ["copy", "checkout"])
def test_copy_of_the_plugin_is_tolerated(tmp_path, first):
    copy = copy_plugin(tmp_path / "site")
    imported, requested = (copy, USER_DIR) if first == "copy" else (USER_DIR, copy)
    proc = run_python(PRELUDE + textwrap.dedent("""
        sys.path.insert(0, sys.argv[3])
        import fairseq_posattn
        assert list(fairseq_posattn.__path__) == [sys.argv[1]], fairseq_posattn.__path__
        from fairseq import utils
        try:  # fairseq's own function: the defect the repair handles
            utils.import_user_module.__wrapped__(Namespace(user_dir=sys.argv[2]))
        except ImportError as e:
            print("UNREPAIRED", e)
        utils.import_user_module(Namespace(user_dir=sys.argv[2]))
        utils.import_user_module(Namespace(user_dir=sys.argv[2]))
        print("USED", fairseq_posattn.__path__[0])
        """), imported, requested, imported.parent)
    assert "not globally unique" in proc.stdout.split("UNREPAIRED", 1)[1]
    assert "USED %s" % imported in proc.stdout
    warnings = [l for l in proc.stderr.splitlines() if l.startswith("WARNING")]
    assert len(warnings) == 1, proc.stderr  # memoised: warned once
    assert str(imported) in warnings[0] and str(requested) in warnings[0]
    assert "that copy is used" in warnings[0]


def test_foreign_directory_with_the_same_name_still_fails(tmp_path):
    foreign = tmp_path / "other" / "fairseq_posattn"
    foreign.mkdir(parents=True)
    (foreign / "__init__.py").write_text("VALUE = 1\n")
    proc = run_python(PRELUDE + textwrap.dedent("""
        import fairseq_posattn
        from fairseq import utils
        try:
            utils.import_user_module(Namespace(user_dir=sys.argv[1]))
        except ImportError as e:
            print("RAISED", e)
        """), foreign)
    assert "RAISED Failed to import --user-dir=%s" % foreign in proc.stdout
    assert "not globally unique" in proc.stdout


def test_cli_with_copy_imported_first(tmp_path, toy_data_bin):
    """A fairseq command run from a script that imported an installed copy,
    with --user-dir naming the checkout."""
    copy = copy_plugin(tmp_path / "site")
    proc = run_python(PRELUDE + textwrap.dedent("""
        sys.path.insert(0, sys.argv[1])
        import fairseq_posattn
        from fairseq_cli import train
        sys.argv = ["fairseq-train", sys.argv[2], "--user-dir", sys.argv[3],
                    "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
                    "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
                    "--encoder-attention-heads", "1", "--decoder-attention-heads", "1",
                    "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
                    "--max-update", "1", "--cpu", "--num-workers", "0", "--no-save",
                    "--disable-validation", "--no-progress-bar"]
        train.cli_main()
        print("TRAINED")
        """), copy.parent, toy_data_bin, USER_DIR)
    assert "TRAINED" in proc.stdout
    assert "another copy of the fairseq_posattn plugin" in proc.stderr
