"""scripts/setup_env.sh refuses a Python the package does not support, before it creates anything."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def interpreter_claiming(tmp_path: Path, version: tuple) -> Path:
    """An interpreter (this one) whose ``sys.version_info`` is ``version``: setup_env.sh asks
    the interpreter its version only through ``PYTHON -c CODE``."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = -c ] || exit 2\n'
                       f'exec "{sys.executable}" -c "import sys; sys.version_info = {version!r}; exec(sys.argv[1])" "$2"\n')
    wrapper.chmod(0o755)
    return wrapper


def run_setup(tmp_path: Path, version: tuple) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(interpreter_claiming(tmp_path, version)),
           "VENV": str(tmp_path / "venv")}
    return subprocess.run(["bash", str(REPO / "scripts" / "setup_env.sh")], env=env,
                          capture_output=True, text=True, timeout=60)


def test_an_older_python_is_refused_naming_the_supported_ones(tmp_path):
    proc = run_setup(tmp_path, (3, 9, 18, "final", 0))
    assert proc.returncode != 0
    assert "Python 3.10, 3.11, 3.12 and 3.13 are supported" in proc.stderr and "is 3.9" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_a_newer_python_is_warned_about_and_goes_on(tmp_path):
    # it goes on to create the environment, which the stand-in interpreter cannot: the warning came first
    proc = run_setup(tmp_path, (3, 14, 0, "final", 0))
    assert "WARNING: Python 3.14 has not been checked (supported: 3.10, 3.11, 3.12 and 3.13)" in proc.stderr
    assert "are supported" not in proc.stderr


def test_the_documented_set_up_time_names_its_machine_date_and_a_commit_of_that_date():
    text = " ".join((REPO / "docs" / "setup.md").read_text(encoding="utf-8").split())
    measured = re.search(r"On the 2-core development machine \(an? ([^,]+),[^)]*\) a fresh set-up took about "
                         r"(\d+ min \d+ s) on (\d{4}-\d\d-\d\d) \(commit ([0-9a-f]{7,40})\)", text)
    assert measured, "docs/setup.md's set-up time lacks its machine, date or commit"
    committed = subprocess.run(["git", "show", "-s", "--format=%cs", measured[4]], cwd=REPO,
                               capture_output=True, text=True)
    assert committed.returncode == 0, f"git does not know commit {measured[4]}"
    assert committed.stdout.strip() <= measured[3]  # measured at a commit that existed then
