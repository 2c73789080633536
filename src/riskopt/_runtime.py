"""Process-wide run-time services: the "compiling, first run only" notice and Ctrl-C.

**Compile notice.** The numba kernels are compiled at their first call and cached on disk
(``cache=True``); a cold cache costs seconds on the first fit. :func:`install_compile_listener`
(called when :mod:`riskopt._kernels` is imported) registers a numba event listener: at the
first compilation of a riskopt kernel in this process (a cache miss: numba fires no compile
event for a kernel loaded from its cache) the current *sink* is told once
(:data:`COMPILE_NOTICE`). The CLI's sink prints to stderr, a ``verbose`` estimator's to stdout
(:func:`compile_notice_to`); without a sink nothing is printed. :func:`compiling` says whether
a kernel is being compiled right now (the CLI's Ctrl-C handler exits at once then: llvmlite may
otherwise swallow the interrupt).

**Interrupts.** :func:`pending_file` registers a temporary file of an atomic write in progress
(``riskopt.bench._io.atomic_write``); :func:`hard_exit` removes them and ends the process
with ``os._exit`` (no traceback, no half-written output, no unwinding through numba or
llvmlite).

Standard library only (numba is imported by the listener's installation, which the kernels'
package triggers).
"""
import contextlib
import os
import sys
import threading

COMPILE_NOTICE = "compiling riskopt kernels, first run only"

_lock = threading.Lock()
_state = {"installed": False, "notified": False, "depth": 0, "sinks": [], "count": 0}
_pending = set()


def _is_ours(event):
    disp = event.data.get("dispatcher") if isinstance(event.data, dict) else None
    func = getattr(disp, "py_func", None)
    return str(getattr(func, "__module__", "")).startswith("riskopt.")


def install_compile_listener():
    """Register the numba compile listener once per process (idempotent)."""
    with _lock:
        if _state["installed"]:
            return
        _state["installed"] = True
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev):
            if not _is_ours(ev):
                return
            _state["depth"] += 1
            _state["count"] += 1
            if not _state["notified"] and _state["sinks"]:
                _state["notified"] = True
                try:
                    _state["sinks"][-1](COMPILE_NOTICE)
                except Exception:  # a closed stream must not break the fit
                    pass

        def on_end(self, ev):
            if _is_ours(ev):
                _state["depth"] = max(0, _state["depth"] - 1)

    event.register("numba:compile", _Listener())


def compiling():
    """True while a riskopt kernel is being compiled (in this process)."""
    return _state["depth"] > 0


def compiled_count():
    """How many riskopt kernel compilations (cache misses, nested ones included) this process
    has started."""
    return _state["count"]


def notice_shown():
    """True once the compile notice was given in this process."""
    return _state["notified"]


@contextlib.contextmanager
def compile_notice_to(sink):
    """Within the block, the first compilation of a riskopt kernel (if any, once per process)
    calls ``sink(COMPILE_NOTICE)``; the innermost block's sink wins."""
    _state["sinks"].append(sink)
    try:
        yield
    finally:
        _state["sinks"].remove(sink)


def verbose_notice(estimator):
    """:func:`compile_notice_to` printing ``[ClassName] ...`` on stdout when the estimator is
    ``verbose``; a no-op context otherwise."""
    if not getattr(estimator, "verbose", 0):
        return contextlib.nullcontext()
    name = type(estimator).__name__
    return compile_notice_to(lambda msg: print(f"[{name}] {msg}", flush=True))


def stderr_notice(message):
    """The CLI's sink: one ``riskopt: ...`` line on stderr."""
    print(f"riskopt: {message}", file=sys.stderr, flush=True)


def pending_file(path, add=True):
    """Register (``add``) or forget the temporary file of a write in progress."""
    (_pending.add if add else _pending.discard)(str(path))


def hard_exit(message="riskopt: interrupted", status=130):
    """One line on stderr, the temporary files of writes in progress removed, and
    ``os._exit(status)``."""
    for path in list(_pending):
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            sys.stderr.write("\r\x1b[?25h\x1b[K")  # a progress display may hide the cursor
        print(message, file=sys.stderr, flush=True)
        if sys.stdout is not None:
            sys.stdout.flush()
    except Exception:
        pass
    os._exit(status)
