"""The progress display of ``riskopt fit`` (rich live table, or plain lines without rich):
solver, updates of the cap, objective and relative (sub)gradient norm, elapsed time."""
import sys
import time


#: the gap column of the progress display: the relative (sub)gradient norm that the
#: stochastic fits' stopping test compares with ``tol`` (riskopt.callbacks.ConvergenceMonitor)
GAP_HEADER = "|grad F|/|grad F(0)|"


def _fmt(v, spec=".6g"):
    return "-" if v is None or v != v else format(v, spec)


class _FitProgress:
    """The progress display of ``riskopt fit`` on standard error: solver, updates done of the
    cap, objective and relative (sub)gradient norm (:data:`GAP_HEADER`), elapsed time.

    ``mode``: ``"auto"`` (shown when standard error is a terminal), ``"on"`` (always; a
    terminal display is forced) or ``"off"``. A rich table (live) when rich is installed,
    else plain lines (at most one a second). It only reads: the fitted model is the same.

    Stochastic solvers report through their convergence monitor (the class that
    :func:`riskopt.solvers.autotune.autotune` instantiates is swapped, for the fit, for a
    subclass that forwards each recorded pass here); L-BFGS reports nothing while it runs
    (``riskopt.solvers.LBFGS.run`` calls its callback only at the start and the end, and the
    estimator passes none): its row says "full batch" and gets the final iterations,
    objective and gradient norm when it ends."""

    def __init__(self, reg, cap, title, mode="auto"):
        self.reg, self.cap, self.title = reg, cap, title
        stream = sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        self.enabled = mode == "on" or (mode == "auto" and tty)
        self.force = mode == "on" and not tty
        self.stream = stream
        self.k = self.f = self.gap = None
        self.phase, self.tries, self.done = "", 0, False
        self.fresh, self.tune_passes, self.monitors = False, 2.0, []
        self.live = self.t0 = None
        self._last = 0.0

    # -- reports of the fit --------------------------------------------------------------
    def monitor_start(self, mon, fresh, tune_passes=2.0):
        """A monitor starts: ``fresh``, a new step-size candidate (autotune runs each for
        about ``tune_passes`` passes); else the chosen candidate goes on."""
        self.fresh, self.tune_passes = fresh, tune_passes
        if fresh:
            self.tries += 1
            self.monitors.append(mon)
        self.phase = f"step-size try {self.tries}" if fresh else ""

    def record(self, mon):
        import math

        self.k = len(mon.values) - 1
        if self.fresh and self.k and mon.passes[-1] > 0:
            ppu = mon.passes[-1] / self.k  # past a candidate's budget (autotune's rule): the
            if self.k > max(1, round(self.tune_passes / ppu)):  # only one, running on
                self.phase = ""
        self.f = mon.values[-1]
        g, g0 = mon.grad_norms[-1], mon.g_zero
        self.gap = g / g0 if g0 and math.isfinite(g0) and g0 > 0 else None
        if self.live is None and self.enabled and time.perf_counter() - self._last >= 1.0:
            self._line()

    def finish(self, point):
        """The final row: the model's iterations, and ``(F, gap)`` of the returned model: the
        best iterate of the monitor whose trace the estimator kept (the point it returns;
        the gap in the solver's coordinates, as while it ran), else ``point()`` (L-BFGS: the
        gap of the model's training objective in its input coordinates)."""
        reg = self.reg
        got = self._best(getattr(reg, "objective_trace_", None)) if self.enabled else None
        got = point() if got is None and self.enabled else got
        if got is None and self.f is None:
            trace = getattr(reg, "objective_trace_", None)
            got = (float(trace[-1]) if trace is not None and len(trace) else None), None
        if got is not None:  # the display thread reads these: set them together
            self.f, self.gap = got
        self.k = getattr(reg, "n_iter_", self.k)
        self.phase, self.done = "", True

    def _best(self, trace):
        import numpy as np

        for mon in reversed(self.monitors):
            values = np.asarray(mon.values, dtype=float)
            if trace is None or values.shape != np.shape(trace) or \
                    not np.array_equal(values, trace, equal_nan=True) or \
                    not np.isfinite(values).any():
                continue
            i = int(np.nanargmin(values))
            g0 = mon.g_zero
            ok = g0 is not None and np.isfinite(g0) and g0 > 0
            return float(values[i]), (mon.grad_norms[i] / g0 if ok else None)
        return None

    # -- display -------------------------------------------------------------------------
    def _solver(self):
        name = getattr(self.reg, "solver_", None)
        if name is None:
            return "choosing a solver"
        if name == "lbfgs":
            name = "L-BFGS (full batch)"
        return f"{name} ({self.phase})" if self.phase else name

    def _cells(self):
        """solver, iter, objective, gap, elapsed (text)."""
        return (self._solver(), f"{'-' if self.k is None else self.k}/{self.cap}",
                _fmt(self.f), _fmt(self.gap, ".2e"), f"{time.perf_counter() - self.t0:.1f} s")

    def _line(self):
        self._last = time.perf_counter()
        solver, it, f, gap, elapsed = self._cells()
        print(f"riskopt: fit: {solver}  iter {it}  objective {f}  {GAP_HEADER} {gap}  {elapsed}",
              file=self.stream, flush=True)

    def _table(self):
        from rich import box
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        t = Table(title=self.title, title_justify="left", caption_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False,
                  caption=f"iter: solver updates (L-BFGS iterations, Newton steps) of --max-iter; "
                          f"{GAP_HEADER}: relative (sub)gradient norm (a stochastic solver "
                          "stops when it is at most --tol)")
        for head in ("solver", "", "iter", "objective", GAP_HEADER.replace("/", "/\n"),
                     "elapsed"):
            t.add_column(head, no_wrap=head != "solver", overflow="fold",
                         justify="left" if head in ("solver", "") else "right")
        running = self.k is None and not self.done
        bar = ProgressBar(total=None if running else self.cap, pulse=running, width=10,
                          completed=0 if running else min(self.k or 0, self.cap))
        solver, *rest = self._cells()
        t.add_row(solver, bar, *rest)
        return t

    def __enter__(self):
        self.t0 = time.perf_counter()
        if not self.enabled:
            return self
        try:
            from rich.console import Console
            from rich.live import Live
        except ImportError:  # rich is optional (riskopt[bench]): plain lines instead
            print(f"riskopt: {self.title}", file=self.stream, flush=True)
            return self
        console = Console(file=self.stream, force_terminal=True if self.force else None)
        self.live = Live(console=console, get_renderable=self._table, redirect_stdout=False,
                         refresh_per_second=1 if self.force else 8, redirect_stderr=True)
        self.live.start()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.stop()  # the last refresh shows the final row
        elif self.enabled and self.done:
            self._line()


class _reporting:
    """Within the block, the convergence monitor of the stochastic fits reports every
    recorded pass to ``progress`` (see :class:`_FitProgress`; a no-op when it is off)."""

    def __init__(self, progress):
        self.progress, self.module, self.base = progress, None, None

    def __enter__(self):
        if not self.progress.enabled:
            return self
        from .solvers import autotune as module

        base = getattr(module, "ConvergenceMonitor", None)
        if base is None:
            return self
        progress, tune = self.progress, float(getattr(module, "TUNE_PASSES", 2.0))

        class Reporting(base):
            def on_start(self, objective, coef):
                progress.monitor_start(self, getattr(self, "values", None) is None, tune)
                super().on_start(objective, coef)

            def _record(self, passes, elapsed, value, coef=None):
                super()._record(passes, elapsed, value, coef)
                progress.record(self)

        self.module, self.base = module, base
        module.ConvergenceMonitor = Reporting
        return self

    def __exit__(self, *exc):
        if self.module is not None:
            self.module.ConvergenceMonitor = self.base
