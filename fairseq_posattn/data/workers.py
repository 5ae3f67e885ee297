"""Worker processes that never hang the command that starts them.

:func:`worker_pool` runs a function over many items in processes started by
``forkserver`` or ``spawn``, never by forking the calling process, which may
run threads (tqdm's monitor, fairseq's data loading) whose locks a fork would
copy held.  ``forkserver`` forks every worker from one server process that
does nothing else and has imported the plugin once, so a worker starts in a
tenth of a second instead of importing it (seconds).  Each worker has a pipe
of its own: no lock is shared, so a worker that dies cannot leave one held.
As with any of these start methods, a script that starts workers guards its
top level with ``if __name__ == "__main__":``.

Whatever ends the run (an item that fails, a worker that dies, an error of
the caller, Ctrl-C) the workers are stopped within :data:`STOP_SECONDS`
(SIGTERM, then SIGKILL), and the first error (in the items' order, unless
results are taken as they come) is raised as the worker raised it (the
plugin's message naming file, sentence and line), without the pool's
traceback.
"""

import contextlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Callable, Iterable, Iterator, List, Optional, Sequence

from ..errors import UserError

logger = logging.getLogger(__name__)

START_METHODS = ("forkserver", "spawn")
STOP_SECONDS = 10.0  # for the workers to end after SIGTERM, and again after SIGKILL
_PLUGIN = __name__.partition(".")[0]
PRELOAD = [_PLUGIN]  # what the forkserver imports once, for all the workers it forks


class WorkerDied(UserError, RuntimeError):
    """A worker process ended while it worked on an item (killed, out of memory?)."""


def _serve(connection, initializer: Optional[Callable], initargs: Sequence) -> None:
    """A worker: receive ``(function, index, item)``, send back ``(index,
    function(item), None)`` or ``(index, None, error)``; end at ``None`` or
    when the parent has gone.  ``initializer(*initargs)`` runs before the
    first item; its error is that item's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
    started = initializer is None
    while True:
        try:
            task = connection.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        function, index, item = task
        try:
            if not started:
                initializer(*initargs)
                started = True
            reply = (index, function(item), None)
        except Exception as error:  # noqa: BLE001 - sent to the parent, which raises it
            reply = (index, None, _portable(error))
        try:
            connection.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as error:  # an unpicklable result
            connection.send((index, None, _portable(error)))
        except OSError:
            return


def _portable(error: Exception) -> Exception:
    """``error`` ready to be sent: the plugin's own errors as they are (their
    message says what is wrong and where), any other with the worker's
    traceback as a note; a RuntimeError saying the same if it cannot be pickled."""
    if type(error).__module__.partition(".")[0] != _PLUGIN:
        error.add_note("(in worker process %d)\n%s" % (os.getpid(), traceback.format_exc()))
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to pickle
        return RuntimeError("\n".join(["%s: %s" % (type(error).__name__, error),
                                       *getattr(error, "__notes__", [])]))


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore Ctrl-C for a moment, in the main thread: a process started now
    is born ignoring it (an ignored signal stays ignored through exec)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Worker:
    def __init__(self, context, initializer, initargs):
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, initializer, initargs),
                                       daemon=True)
        if context.get_start_method() == "spawn":
            with _sigint_ignored():
                self.process.start()
        else:  # forkserver: its children inherit the server's signal handlers
            self.process.start()
        theirs.close()
        self.item = None  # what it works on; None when idle
        self.busy = False

    def how_it_ended(self) -> str:
        self.process.join(STOP_SECONDS)
        code = self.process.exitcode
        if code is not None and code < 0:
            return "was killed by %s (out of memory?)" % signal.Signals(-code).name
        return "exited with code %s (its error is above)" % code


class _Pool:
    """The workers of :func:`worker_pool`; :meth:`map` hands them the items."""

    def __init__(self, processes: int, initializer, initargs, start_method: str):
        if start_method not in START_METHODS:
            raise ValueError("start method %r is not one of %s" % (start_method, START_METHODS))
        context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            context.set_forkserver_preload(PRELOAD)  # no effect once the server runs
            with _sigint_ignored():  # the server, and so every worker, ignores Ctrl-C
                multiprocessing.forkserver.ensure_running()
        self.workers: List[_Worker] = []
        try:
            for _ in range(processes):
                self.workers.append(_Worker(context, initializer, initargs))
        except BaseException:
            self.stop(now=True)
            raise

    def map(self, function: Callable, items: Iterable, ordered: bool = True,
            name: Callable[[object], str] = repr) -> Iterator:
        """``function(item)`` for every item, in order or as they come; ``name(item)``
        says which item a worker that died was working on.  In order, the error
        raised is that of the first item that fails, as in one process; as they
        come, the first error to arrive."""
        items = enumerate(items)
        ahead = 2 * len(self.workers)  # in order: results kept waiting for an earlier one, at most
        waiting, next_out, handed, exhausted, failed = {}, 0, 0, False, False
        while True:
            for worker in self.workers:
                if worker.busy or exhausted or failed or (ordered and handed >= next_out + ahead):
                    continue
                index, item = next(items, (None, None))
                if index is None:
                    exhausted = True
                    break
                self._hand(worker, function, index, item, name)
                handed += 1
            busy = [worker for worker in self.workers if worker.busy]
            if not busy:
                return
            ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                index, result, error = self._receive(worker, name)
                if not ordered:
                    if error is not None:
                        raise error from None
                    yield result
                    continue
                # in order, an item's error waits for the items before it, whose own error comes first:
                # the error one process would raise, whichever worker finishes first
                waiting[index] = result, error
                failed = failed or error is not None
                while next_out in waiting:
                    result, error = waiting.pop(next_out)
                    if error is not None:
                        raise error from None
                    yield result
                    next_out += 1

    @staticmethod
    def _hand(worker: _Worker, function, index: int, item, name) -> None:
        try:
            worker.connection.send((function, index, item))
        except OSError:
            raise WorkerDied("a worker process %s before it could take %s"
                             % (worker.how_it_ended(), name(item))) from None
        worker.item, worker.busy = item, True

    @staticmethod
    def _receive(worker: _Worker, name):
        try:
            if worker.connection.poll():
                reply = worker.connection.recv()
                worker.item, worker.busy = None, False
                return reply
        except (EOFError, OSError):
            pass
        raise WorkerDied("a worker process %s while it worked on %s; rerun the command (with "
                         "fewer --workers if memory is short)" % (worker.how_it_ended(),
                                                                 name(worker.item)))

    def stop(self, now: bool) -> None:
        """End the workers within 2 * :data:`STOP_SECONDS`: idle ones when told
        to (unless ``now``), the others by SIGTERM, then those left by SIGKILL."""
        for worker in self.workers:
            if now or worker.busy:
                worker.process.terminate()
            else:
                with contextlib.suppress(OSError):
                    worker.connection.send(None)
        if not self._ended():
            for worker in self.workers:
                worker.process.kill()
            self._ended()
        for worker in self.workers:
            worker.connection.close()
            if worker.process.is_alive():
                logger.warning("worker process %d did not end after SIGKILL; leaving it",
                               worker.process.pid)

    def _ended(self) -> bool:
        """Wait up to :data:`STOP_SECONDS` in all for the workers to end; whether they have."""
        deadline = time.monotonic() + STOP_SECONDS
        for worker in self.workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        return not any(worker.process.is_alive() for worker in self.workers)


@contextlib.contextmanager
def worker_pool(processes: int, initializer: Optional[Callable] = None, initargs: Sequence = (),
                start_method: str = "forkserver"):
    """``processes`` worker processes for the block; yields their ``map(function,
    items, ordered=True, name=repr)``, an iterator over ``function(item)``.
    ``function``, the items and the results must pickle (module-level
    functions).  ``initializer(*initargs)`` runs in each worker before its
    first item.  The workers are stopped when the block ends, however it ends."""
    pool = _Pool(processes, initializer, initargs, start_method)
    try:
        yield pool.map
    except BaseException:
        pool.stop(now=True)
        raise
    pool.stop(now=False)
