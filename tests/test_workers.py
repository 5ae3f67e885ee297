"""Worker pools (fairseq_posattn.data.workers) end within a bounded time
however a run ends, and raise the first error as the worker raised it."""

import multiprocessing
import signal
import time

import pytest

from fairseq_posattn.data.preprocess import parts_map
from fairseq_posattn.data.workers import STOP_SECONDS, WorkerDied, worker_pool
from fairseq_posattn.structure import StructureError, check_tree

from conftest import children_started_since

# a generous bound for one run that fails: starting two workers, and stopping them
BOUND = 2 * STOP_SECONDS


def cpu_seconds(item):
    """The worker's CPU time so far: its start-up, when it is the first item."""
    return time.process_time()


def sleep_then_fail(seconds):
    time.sleep(seconds)
    raise ValueError("item %s failed" % seconds)


@pytest.mark.timeout(120)
def test_the_first_error_is_raised_as_the_worker_raised_it():
    before = multiprocessing.active_children()
    with worker_pool(2) as each:
        assert list(each(int, ["3", "1", "2"])) == [3, 1, 2]
        assert sorted(each(int, ["3", "1", "2"], ordered=False)) == [1, 2, 3]
        with pytest.raises(StructureError, match=r"^HEAD 3 of word 1 is out of range 0\.\.1\. "
                           "HEAD must be") as error:  # the plugin's message, as it is
            list(each(check_tree, [[0], [3]]))
        assert not getattr(error.value, "__notes__", None)
        with pytest.raises(ValueError, match="invalid literal") as error:  # any other error
            list(each(int, ["1", "x", "2"]))
        assert "in worker process" in error.value.__notes__[0]  # where it was raised
    assert not children_started_since(before)


@pytest.mark.timeout(120)
def test_in_order_the_first_item_that_fails_is_the_error_whichever_worker_ends_first():
    """The error one process would raise: the later item fails at once, the earlier one after a while."""
    with worker_pool(2) as each:
        with pytest.raises(ValueError, match="item 0.5 failed"):
            list(each(sleep_then_fail, [0.5, 0.0]))
        with pytest.raises(ValueError, match="item 0.0 failed"):  # as they come: the first to arrive
            list(each(sleep_then_fail, [0.5, 0.0], ordered=False))


@pytest.mark.timeout(120)
def test_a_worker_that_dies_is_named_and_the_others_stopped_at_once(forkserver):
    """A worker killed in the middle of a part (as by the kernel's OOM killer)
    ends the run with a message naming the part (multiprocessing.Pool replaced
    the worker and waited for the lost part for ever); a part that fails ends
    it without waiting for the part another worker is busy with."""
    before = multiprocessing.active_children()
    started = time.monotonic()
    with pytest.raises(WorkerDied, match=r"was killed by SIGKILL \(out of memory\?\) while it "
                       r"worked on <Signals.SIGKILL: 9>; rerun the command"):
        with parts_map(2, 3) as each:
            list(each(signal.raise_signal, [signal.SIGCONT, signal.SIGKILL, signal.SIGCONT]))
    with pytest.raises(ValueError, match="item 0.1 failed"):
        with parts_map(2, 2) as each:
            list(each(sleep_then_fail, [0.1, 60]))  # the second is stopped, not awaited
    assert time.monotonic() - started < BOUND
    assert not children_started_since(before)


@pytest.mark.timeout(120)
def test_a_forkserver_worker_starts_in_a_fraction_of_an_import():
    """Forked from a server that imported the plugin once, a worker spends far
    less CPU time starting than a process that imports the plugin (CPU time,
    which load does not change)."""
    with worker_pool(1, start_method="forkserver") as each:
        forked = min(each(cpu_seconds, range(1)))
    with worker_pool(1, start_method="spawn") as each:
        spawned = min(each(cpu_seconds, range(1)))
    assert forked < spawned / 5, (forked, spawned)
