"""Process lifetime of a benchmark run: no worker outlives its parent.

* :func:`terminate_as_interrupt` -- while a run lasts, ``SIGTERM`` / ``SIGHUP`` raise
  ``KeyboardInterrupt`` in the parent, so that the ``finally`` clauses run (temporary files
  removed, lock released, workers stopped); the previous handlers are restored afterwards.
* :func:`kill_workers` -- on an exception or an interrupt, joblib's reusable loky executor is
  shut down with ``kill_workers=True`` (its workers would otherwise finish their tasks and
  idle for minutes).
* :func:`watch_parent` -- in a worker process that is a direct child of the run, a daemon
  thread exits the worker within half a second of the parent's death (``kill -9`` included,
  where the parent can run no code); it is the loky workers' initializer, and every task
  calls it too (other process pools).
* :func:`parallel` -- joblib ``Parallel`` yielding each result as soon as it is done
  (``batch_size=1``: a result is never held back waiting for the rest of its batch); loky
  workers run :func:`watch_parent` from the moment they start.
"""
import os
import signal
import threading
import time
from contextlib import contextmanager

_WATCHED = []


@contextmanager
def terminate_as_interrupt(signals=("SIGTERM", "SIGHUP")):
    """Turn the given signals into ``KeyboardInterrupt`` in this (main) thread meanwhile.

    Signals whose handler is not the default one (set by the application) are left alone;
    outside the main thread nothing is installed.
    """
    installed = {}
    if threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

        for name in signals:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                if signal.getsignal(sig) in (signal.SIG_DFL, None):
                    installed[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):
                pass
    try:
        yield
    finally:
        for sig, old in installed.items():
            try:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass


def kill_workers():
    """Stop joblib's reusable loky executor and kill its workers (if one was started)."""
    try:
        from joblib.externals.loky import reusable_executor
    except ImportError:  # pragma: no cover
        return
    executor = getattr(reusable_executor, "_executor", None)
    if executor is None:
        return
    try:
        executor.shutdown(wait=True, kill_workers=True)
    except Exception:  # pragma: no cover - best effort on the way out
        pass


def _loky_worker():
    """Whether this process is a loky worker (whose parent is the process that ran the
    ``Parallel`` call, i.e. the run)."""
    import multiprocessing

    return multiprocessing.current_process().name.startswith("LokyProcess")


def watch_parent(parent):
    """Exit this process when ``parent`` dies, if this process is its direct child (a loky
    worker); a no-op in the parent itself and on remote (dask, ray) workers.

    A loky worker that starts (or gets its first task) only after the parent died exits at
    once: it has been reparented, whether or not the dead parent was reaped yet.
    """
    if not parent or _WATCHED or os.getpid() == parent:
        return
    if os.getppid() != parent:
        if _loky_worker():  # reparented before it started watching: the run is gone
            os._exit(1)
        return
    _WATCHED.append(parent)

    def loop():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:  # reparented: the run is gone
                os._exit(1)

    threading.Thread(target=loop, name="riskopt-parent-watch", daemon=True).start()


@contextmanager
def parallel(jobs, backend):
    """``with parallel(jobs, backend) as par``: a joblib ``Parallel`` yielding results as each
    task ends (unordered, unbatched). Loky workers start :func:`watch_parent` as their
    initializer, so that even a worker that never gets a task dies with the run."""
    from contextlib import nullcontext

    from joblib import Parallel, parallel_config
    from joblib.parallel import get_active_backend

    with parallel_config(backend=backend) if backend else nullcontext():
        kwargs = {}
        if type(get_active_backend()[0]).__name__ == "LokyBackend" and jobs != 1:
            kwargs = {"initializer": watch_parent, "initargs": (os.getpid(),)}
        yield Parallel(n_jobs=jobs, return_as="generator_unordered", batch_size=1, **kwargs)
