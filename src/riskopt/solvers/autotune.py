r"""Step-size search for the stochastic solvers: :func:`autotune`.

What :class:`riskopt.RiskRegressor` and :class:`riskopt.RiskClassifier` do with ``lr="auto"``,
usable on any objective and any registered solver (built-in or plug-in).

Base step
---------
For the spectral family, from the smoothness constants (:func:`smoothness_lr`): a step on
sample ``i`` is scaled by its weight ``n q_i <= n max(sigma)`` and the loss gradient is
``L_i``-Lipschitz (``objective.smoothness()``: ``|x_i|^2`` times 1, 1/4, 1/2 for squared /
logistic / multinomial; ``|x_i|^2`` as the scale of the absolute loss), so
``lr0 = 1 / (n max(sigma) max_i L_i)`` (at most ``1 / max(l2_reg)``). Other families give their
own base step (``base_lr``) or keep the solver's default ``lr``.

Search
------
With the spectral bound, the candidates ``lr0 * (3, 1, 1/3, 1/10)`` (:data:`LR_CANDIDATES`,
the papers' grid spacing around the bound) run for about :data:`TUNE_PASSES` oracle passes
each, from the same start and the same index stream, and the one with the lowest average
training objective over those passes is kept, divergent runs discarded (the papers' selection
rule). With a single candidate (a numeric ``lr``, a family's ``base_lr``, the step of the
previous fit on a warm start) that candidate simply runs. When every candidate diverges, the
step keeps shrinking ten-fold below the smallest one. The run then continues from the chosen
candidate's state, so its tuning passes are not lost; should it later diverge, it restarts
from the best iterate with a three times smaller step (at most :data:`MAX_RESTARTS` times,
and only with ``lr="auto"``).

SOREL's dual step (``dual_lr``, which multiplies the losses) is set with ``lr="auto"`` to
``SOREL_DUAL_SCALE / mean_i l_i(w_start)`` unless given.

Convergence and the trace
-------------------------
Every candidate reports through one :class:`riskopt.callbacks.ConvergenceMonitor` (a
:class:`riskopt.Trace`): the run stops when ``|grad F(w)| <= tol |grad F(0)|`` or, for a
problem that is not smooth, when the objective stalls (see the monitor); the monitor carries
on across the resumed and restarted runs of the chosen candidate and keeps the best iterate,
which is what is returned. The measurements behind the constants are in the module docstring
of ``tests/test_estimators.py``.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> from riskopt.solvers.autotune import autotune
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(200, 3)); y = X @ [1.0, -2.0, 0.5] + rng.normal(size=200)
>>> obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=1 / 200)
>>> res = autotune("prospect", obj, max_epochs=200, random_state=0)
>>> len(res.lr_search), res.converged, res.lr == min(res.lr_search, key=res.lr_search.get)
(4, True, True)
>>> len(res.values) == res.n_updates + 1
True
"""
import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..callbacks import ConvergenceMonitor, value_grad_norm
from ._registry import get_class

__all__ = ["autotune", "AutotuneResult", "smoothness_lr", "LR_CANDIDATES", "TUNE_PASSES",
           "MAX_RESTARTS", "SOREL_DUAL_SCALE"]

#: Multipliers of the smoothness bound tried by the search (largest first).
LR_CANDIDATES = (3.0, 1.0, 1.0 / 3.0, 1.0 / 10.0)
#: Oracle passes spent on each candidate of the search.
TUNE_PASSES = 2.0
#: Restarts with a 3x smaller step after a divergence detected in the main run.
MAX_RESTARTS = 3
#: SOREL with ``lr="auto"``: ``dual_lr = SOREL_DUAL_SCALE / mean_i l_i(w_start)``.
SOREL_DUAL_SCALE = 0.1
#: An update is divergent when ``F > F(start) + (factor - 1) |F(start)|`` (as :class:`Trace`).
DIVERGENCE_FACTOR = 1.5


@dataclass
class AutotuneResult:
    """Outcome of :func:`autotune`.

    Attributes
    ----------
    coef : ndarray
        The best iterate of the returned run (public coefficient shape of the objective).
    lr : float or None
        The step size used at the end (after restarts); None when the solver has no ``lr``.
    lr_search : dict or None
        Score (mean objective over the tuning passes, ``inf`` when divergent) by candidate
        step size, when more than one candidate ran.
    n_updates : int
        Solver updates of the returned run, the chosen candidate's tuning updates included.
    converged, diverged : bool
        Whether the monitor's test was met; whether the last run ended divergent.
    values : ndarray
        ``F`` at the start and after every update of the returned run.
    solver_params : dict
        The solver's hyper-parameters besides ``lr`` and ``random_state`` (with
        SOREL's automatic ``dual_lr``).
    solver : Solver
        The last solver instance run.
    result : riskopt.solvers.Result
        Its last :class:`~riskopt.solvers.Result` (``result.state`` resumes it).
    monitor : riskopt.callbacks.ConvergenceMonitor
        The trace of the returned run.
    """

    coef: np.ndarray
    lr: Any
    lr_search: Any
    n_updates: int
    converged: bool
    diverged: bool
    values: np.ndarray
    solver_params: dict = field(default_factory=dict)
    solver: Any = None
    result: Any = None
    monitor: Any = None


def smoothness_lr(objective):
    """``1 / (n max(sigma) max_i L_i)`` for a spectral objective (module docstring), else None."""
    if getattr(objective, "family", None) != "spectral":
        return None
    L = objective.smoothness()
    if L is None:  # non-smooth loss: |x_i|^2 as the curvature scale of a step
        L = objective.row_sq_norms()
    scale = float(np.max(L)) * objective.n * float(np.max(objective.sigma))
    scale = max(scale, float(np.max(objective.reg)) if objective.reg.size else 0.0, 1e-12)
    return 1.0 / scale


def _seed(random_state):
    """An int seed from ``random_state`` (None, int, RandomState or Generator): for all but a
    Generator, drawn through :func:`sklearn.utils.check_random_state` (the estimators' seeds).
    """
    top = np.iinfo(np.int32).max
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(top))
    from sklearn.utils import check_random_state  # lazy: keeps `import riskopt` light

    return int(check_random_state(random_state).randint(top))


def _make(cls, params, lr, seed):
    """``cls(**params)`` plus ``random_state`` and ``lr`` where the solver takes them."""
    sig = inspect.signature(cls.__init__).parameters
    kw = dict(params)
    if "random_state" in sig:
        kw["random_state"] = seed
    if lr is not None and "lr" in sig:
        kw["lr"] = lr
    return cls(**kw)


def _candidates(objective, name, lr, base_lr, coef0, prev_lr, default_lr=None):
    """Step sizes to try (None: the solver's default).

    Without a smoothness estimate (a family other than spectral) the grid is centred on the
    solver's own default ``lr`` when it has a numeric one, so a default that diverges on
    badly scaled data is not the only step tried."""
    if lr != "auto":
        return [float(lr)]
    if coef0 is not None and prev_lr is not None:
        return [float(prev_lr)]  # warm start: reuse the step tuned last time
    if base_lr is not None:
        return [float(base_lr(objective, name) if callable(base_lr) else base_lr)]
    lr0 = smoothness_lr(objective)
    if lr0 is None and isinstance(default_lr, (int, float)) and not isinstance(default_lr, bool) \
            and np.isfinite(default_lr) and default_lr > 0:
        lr0 = float(default_lr)
    return [None] if lr0 is None else [lr0 * c for c in LR_CANDIDATES]


def _diverged_error(name, lr, after=""):
    return ValueError(
        f"solver {name!r} diverged with lr={lr:g}{after}; use a smaller lr (e.g. "
        f"lr={lr / 10:.3g}, lr/10) or lr='auto' "
        f"(and consider standardising X, e.g. with StandardScaler)")


def autotune(solver, objective, *, params=None, lr="auto", base_lr=None, max_epochs=1000,
             tol=1e-4, random_state=None, coef0=None, prev_lr=None):
    """Run a stochastic solver with an automatic step size (module docstring).

    Parameters
    ----------
    solver : str or Solver subclass
        A registry name (:func:`riskopt.solvers.available`, plug-ins included) or the class.
    objective : objective
        Any objective the solver accepts (``value``; ``value_grad`` for the gradient test).
    params : dict, optional
        Other hyper-parameters of the solver (not ``lr`` / ``random_state``).
    lr : "auto" or float
        ``"auto"``: the search; a number: that step only (a divergence raises ValueError).
    base_lr : float or callable, optional
        With ``lr="auto"``: a single starting step instead of the smoothness grid, or
        ``base_lr(objective, solver_name) -> float`` (how a problem family that is not
        spectral sets its own step). Without it (and not spectral): the solver's default.
    max_epochs : int
        Budget of solver updates of the returned run (each candidate of the search gets
        about ``TUNE_PASSES`` passes of it).
    tol : float or None
        Relative gradient tolerance of the monitor; None: run the whole budget.
    random_state : None, int, RandomState or Generator
        Seeds the solver's index stream (one int seed, as in the estimators).
    coef0 : array, optional
        Starting point (default zeros).
    prev_lr : float, optional
        The step of a previous fit: with ``coef0`` and ``lr="auto"``, reused without search.

    Returns
    -------
    AutotuneResult
    """
    cls = get_class(solver) if isinstance(solver, str) else solver
    name = cls.name
    params = dict(params or {})
    seed = _seed(random_state)
    f_zero, g_zero = value_grad_norm(objective, objective.zeros())

    def monitor():
        return ConvergenceMonitor(tol, f_zero=f_zero, g_zero=g_zero,
                                  divergence_factor=DIVERGENCE_FACTOR)

    if lr == "auto" and name.startswith("sorel") and "dual_lr" not in params \
            and getattr(objective, "family", None) == "spectral":
        # SOREL's dual step eta_k = C (k+1)/n multiplies the losses: C must scale as 1/loss.
        start = objective.zeros() if coef0 is None else coef0
        mean_loss = float(np.mean(objective.losses(start)))
        params["dual_lr"] = SOREL_DUAL_SCALE / max(mean_loss, 1e-12)
    probe = _make(cls, params, None, seed)
    ppu = float(probe.passes_per_update(objective))
    tune_updates = max(1, int(round(TUNE_PASSES / ppu)))
    candidates = _candidates(objective, name, lr, base_lr, coef0, prev_lr,
                             getattr(probe, "lr", None))

    def attempt(step, updates, seed_):
        slv = _make(cls, params, step, seed_)
        mon = monitor()
        res = slv.run(objective, max_epochs=updates, callback=mon, coef0=coef0)
        return mon, slv, res

    # -- tuning: a few updates per candidate, the papers' rule picks one -------------------
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # DivergenceWarning, overflows
        for step in candidates:
            updates = min(tune_updates, max_epochs) if len(candidates) > 1 else max_epochs
            mon, slv, res = attempt(step, updates, seed)
            score = np.inf if mon.diverged else float(np.mean(mon.values[1:] or [np.inf]))
            runs.append((score, step, slv, mon, res))
        finite = [r for r in runs if np.isfinite(r[0])]
        if not finite and lr == "auto" and candidates[-1] is not None:
            step = candidates[-1]  # every candidate diverged: keep shrinking
            while not finite and step > 1e-12:
                step /= 10.0
                mon, slv, res = attempt(step, min(tune_updates, max_epochs), seed)
                if not mon.diverged:
                    finite = [(0.0, step, slv, mon, res)]
    if not finite:
        if lr != "auto":
            raise _diverged_error(name, lr)
        raise ValueError(f"solver {name!r} diverged for every step size tried")
    _, step, slv, mon, res = min(finite, key=lambda r: (r[0], -(r[1] or 0.0)))
    lr_search = {float(r[1]): float(r[0]) for r in runs} if len(runs) > 1 else None

    # -- main run (continues the chosen candidate), restarts on divergence ----------------
    if step is None:  # the solver's own default step
        step = getattr(slv, "lr", None)
    used = len(mon.values) - 1  # one callback call per update
    restarts = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        while not mon.converged and used < max_epochs:
            if mon.diverged:
                if lr != "auto" or restarts >= MAX_RESTARTS or step is None:
                    break
                restarts += 1
                step /= 3.0
                slv = _make(cls, params, step, seed + restarts)
                mon.diverged = False
                res = slv.run(objective, max_epochs=max_epochs - used, callback=mon,
                              coef0=mon.best_coef)
            else:
                res = slv.run(objective, max_epochs=max_epochs - used, callback=mon,
                              state=res.state)
            used = len(mon.values) - 1
    if mon.diverged and lr != "auto":
        raise _diverged_error(name, step, f" after {used} updates")
    coef = mon.best_coef if mon.best_coef is not None else res.coef
    return AutotuneResult(
        coef=coef, lr=None if step is None else float(step), lr_search=lr_search,
        n_updates=used, converged=bool(mon.converged), diverged=bool(mon.diverged),
        values=np.asarray(mon.values, dtype=float), solver_params=params, solver=slv,
        result=res, monitor=mon)
