"""scripts/fairseq_suite.sh and fairseq_suite_compare.py: the comparison of
fairseq's own tests without and with the plugin, from two JUnit reports."""

import importlib.util

from conftest import REPO, run

SCRIPTS = REPO / "scripts"


def compare_module():
    spec = importlib.util.spec_from_file_location("fairseq_suite_compare", SCRIPTS / "fairseq_suite_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def junit(path, cases):
    body = "".join(f'<testcase classname="tests.t" name="{name}">{inner}</testcase>' for name, inner in cases)
    path.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return path


def test_the_comparison_names_every_changed_outcome_and_failure(tmp_path):
    failure = '<failure message="[+4 more lines; full report in element text]">a\nb\nUnpicklingError: x</failure>'
    without = junit(tmp_path / "without.xml", [("a", failure), ("b", ""), ("c", '<skipped message="no gpu"/>'),
                                               ("d", '<failure message="Please install xFormers.">t</failure>')])
    with_plugin = junit(tmp_path / "with.xml", [("a", ""), ("b", ""), ("c", '<skipped message="no gpu"/>'),
                                                ("d", '<failure message="Please install xFormers.">t</failure>')])
    compare_module().main(without, with_plugin, tmp_path)
    report = (tmp_path / "comparison.md").read_text()
    assert "| without the plugin | 1 | 2 | 1 |" in report and "| with the plugin | 2 | 1 | 1 |" in report
    assert "1 tests change outcome" in report
    assert "| `tests.t::a` | failed | passed | UnpicklingError: x |" in report
    assert "| `tests.t::d` | Please install xFormers. |" in report
    assert (tmp_path / "outcomes.tsv").read_text().splitlines()[1:] == [
        "tests.t::a\tfailed\tpassed", "tests.t::b\tpassed\tpassed", "tests.t::c\tskipped\tskipped",
        "tests.t::d\tfailed\tfailed"]


def test_the_script_wants_a_fairseq_checkout(tmp_path):
    proc = run(["bash", SCRIPTS / "fairseq_suite.sh", tmp_path], check=False, timeout=60)
    assert proc.returncode == 2 and "give a checkout of fairseq's repository" in proc.stderr
