"""Stop fairseq's data-loading threads before the interpreter exits.

fairseq's ``BufferedIterator`` (whenever ``--data-buffer-size`` > 0, the
default) collates batches ahead in a daemon thread, ``BackgroundConsumer``,
that nothing stops when a run ends before its iterator is spent.  CPython
before 3.14 ends a daemon thread that wakes during shutdown with
``pthread_exit``; inside a torch operator that calls ``std::terminate``, and a
run that finished exits with 134 ("terminate called without an active
exception").  :func:`install` gives every consumer a stop flag, read between
batches, and an exit handler that raises it, empties the consumers' queues (so
that a waiting one wakes) and joins them while the interpreter still runs.
"""

import atexit
import contextlib
import functools
import logging
import queue
import threading
import time

from .patching import wrap_once

logger = logging.getLogger(__name__)

EXIT_WAIT_SECONDS = 60  # for the batch a consumer is collating when the run ends
_exiting = threading.Event()


def _until_exit(batches):
    """``batches`` until the interpreter begins to exit (read between batches)."""
    for batch in batches:
        yield batch
        if _exiting.is_set():
            return


def _stopping_at_exit(init):
    @functools.wraps(init)
    def wrapper(self, buffer, source, *args, **kwargs):
        init(self, buffer, _until_exit(source), *args, **kwargs)

    return wrapper


def _empty(buffer: queue.Queue) -> None:
    with contextlib.suppress(queue.Empty):
        while True:
            buffer.get_nowait()


def stop_consumers() -> None:
    """Stop and join every live ``BackgroundConsumer`` (the exit handler)."""
    from fairseq.data.iterators import BackgroundConsumer

    _exiting.set()
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    for thread in threading.enumerate():
        if not isinstance(thread, BackgroundConsumer):
            continue
        while thread.is_alive() and time.monotonic() < deadline:
            _empty(thread._queue)
            thread.join(0.05)
        if thread.is_alive():
            logger.warning("fairseq's data-loading thread %s did not stop within %d s of exit: "
                           "the process may abort with 'terminate called without an active "
                           "exception'", thread.name, EXIT_WAIT_SECONDS)


def install() -> None:
    """Make fairseq's consumers stoppable and stop them at exit (idempotent)."""
    from fairseq.data.iterators import BackgroundConsumer

    atexit.unregister(stop_consumers)
    atexit.register(stop_consumers)
    wrap_once(BackgroundConsumer, "__init__", _stopping_at_exit)
