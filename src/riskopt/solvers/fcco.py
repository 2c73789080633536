r"""SONX, SONEX, SOX, ALEXR2 and OOA: stochastic methods for non-smooth coupled compositional
problems, the ``"group_risk"`` (group DRO, CVaR over groups) and ``"constrained"`` (hinge /
squared-hinge penalty) families of :mod:`riskopt.objectives.fcco`.

Paper: "Non-smooth finite-sum coupled compositional optimization" (SONEX / ALEXR2,
``../shared/papers/sonex_alexr2_nonsmooth_fcco.txt``). Each step draws ``B1 =
groups_per_batch`` outer indices (groups or constraints, without replacement), ``B2 =
per_group`` rows of each (with replacement) and, for constrained learning, ``B0 =
objective_batch`` rows of the objective; the kernels are in :mod:`riskopt._kernels.fcco`.

==========  ====================================================================================
``sonx``    the single-loop baseline (Wang & Yang 2022): moving average ``u_i <- (1 - gamma)
            u_i + gamma g_i(w; B)``, a *subgradient* of the outer hinge, momentum / Adam
``sonex``   Algorithm 1: MSVR tracking (``+ gamma_prime (g_i(w_t; B) - g_i(w_{t-1}; B))``), the
            gradient of the Moreau envelope of the hinge (parameter ``smoothing``), momentum or
            Adam-type update
``sox``     SOX (Wang & Yang 2022) for a smooth outer function: the squared-hinge penalty of
            constrained learning (the baseline of the paper's Fig. 2-3)
``alexr2``  Algorithm 2: double loop; ``inner_steps`` ALEXR steps (MSVR-equivalent dual update,
            ``gamma_hat = gamma``, ``theta``) on ``z`` with the prox term ``|z - w_t|^2 / (2
            nu)`` and inner step ``inner_lr``, then the momentum / Adam step on ``w`` with
            ``G_t = (w_t - z) / nu`` (the paper's line 13 writes ``beta / nu``; the extra
            ``beta`` duplicates line 14's and is dropped)
``ooa``     the stochastic primal-dual baseline for group DRO (Eq. (10) as ``min_w max_{p in
            Omega} sum_g p_g L_g(w)``, ``Omega`` the capped simplex ``p_g <= 1/(r m)``): SGD on
            ``w``, projected ascent (``dual_lr``) on ``p``
==========  ====================================================================================

For group DRO the CVaR threshold ``s`` is a variable of the single-loop and double-loop
methods (starting at ``s0``, default 0), updated like ``w`` with the partial derivative
``1 - 1/B1 sum_i f'(u_i - s)``; it is kept in ``state.s`` and ``Result.extra["s"]``, but the
reported point (``Solver.point``) is ``w`` alone, so traces and benchmarks score the exact
group CVaR at ``w`` (the profile over ``s``) for every solver, OOA included. The x-axis unit (``passes_per_update``) counts the rows drawn
(``B1 B2 + B0`` per step): the MSVR correction of SONEX / ALEXR2 evaluates the loss (not its
gradient) once more on the same rows.

Defaults: ``gamma = 0.1`` (and ``gamma_prime = 0.02``, ALEXR2's ``theta = 0.2``) track the
inner values over about ten visits; the paper's experiments use ``gamma = 0.8, gamma_prime =
0.1`` with batches of 64-256 rows per group, which on batches of 16 rows per group left SONEX
1e-2 above the optimum of a small group-DRO problem against 1.5e-3 with the defaults (measured
in ``tests/test_fcco.py``'s problem). ``smoothing`` is the Moreau parameter ``lambda`` itself
(the paper's grids: 2e-2 ... 2e-4).

Step decay (the paper's group-DRO protocol, App. F.1: "step decay (decay by 0.3x for every 3
epochs)"): ``lr_decay`` (in (0, 1], default 1: constant steps) multiplies ``lr`` after every
``decay_every`` updates (one update is one pass), so update ``e`` (0-based) uses ``lr *
lr_decay ** (e // decay_every)``; the schedule follows ``state.epoch``, so a resumed run goes on
with the same steps. It scales ``lr`` only (ALEXR2's outer step; OOA's primal step, not
``dual_lr``).

None of them converges to the exact minimiser with constant steps (SONEX and ALEXR2 minimise
the smoothed problem, SONX uses subgradients, OOA is a constant-step primal-dual method):
``convergent = False``; the tests check they reach the exact optimum to 1e-2 relative on small
convex problems.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(2000, 3)); g = rng.integers(0, 8, size=2000)
>>> y = (X[:, 0] + 0.3 * g * rng.normal(size=2000) > 0).astype(float)
>>> obj = ro.Objective("logistic", ro.CVaR(0.25), X, y, groups=g, l2_reg=0.01)
>>> f_star = obj.reference_solution().value
>>> res = ro.solvers.get("sonex", lr=0.05, random_state=0).run(obj, 20)
>>> bool((res.value - f_star) / f_star < 0.02)
True
"""
from typing import NamedTuple

import numpy as np

from .._kernels import fcco as _k
from .._validation import check_int, check_positive
from ._registry import register
from .base import Solver, copy_arrays

_UPDATES = ("momentum", "adam")


class FCCOState(NamedTuple):
    """``coef`` (p, K), ``epoch``, ``rng``, ``s`` (group CVaR threshold, 0 otherwise),
    ``coef_prev``/``s_prev`` (previous iterate, for MSVR), ``u`` (m,) tracked inner values,
    ``seen`` (m,) first-visit flags, ``v``/``m2`` (first / second moments), ``vs``/``m2s``
    (those of ``s``), ``counters`` ``[steps]``."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    s: float
    coef_prev: np.ndarray
    s_prev: float
    u: np.ndarray
    seen: np.ndarray
    v: np.ndarray
    m2: np.ndarray
    vs: float
    m2s: float
    counters: np.ndarray


class ALEXR2State(NamedTuple):
    """As :class:`FCCOState` with the inner iterate ``z``, ``z_prev``, ``zs``, ``zs_prev`` and
    ``counters = [outer steps, inner position]``."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    s: float
    z: np.ndarray
    z_prev: np.ndarray
    zs: float
    zs_prev: float
    u: np.ndarray
    seen: np.ndarray
    v: np.ndarray
    m2: np.ndarray
    vs: float
    m2s: float
    counters: np.ndarray


class OOAState(NamedTuple):
    """``coef``, ``epoch``, ``rng`` and ``q`` (m,), the group weights in the capped simplex."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    q: np.ndarray


class _FCCOSolver(Solver):
    families = ("group_risk", "constrained")
    convergent = False
    _gamma_prime = True
    _smooth = True
    _smooth_outer_only = False

    def __init__(self, lr=0.05, beta=0.1, gamma=0.1, gamma_prime=0.02, smoothing=0.001,
                 step_rule="momentum", groups_per_batch=None, per_group=16, objective_batch=32,
                 s0=0.0, lr_decay=1.0, decay_every=1, random_state=None):
        self._store(locals())

    # -- parameters -------------------------------------------------------------------
    def _check_decay(self):
        v = check_positive("lr_decay", self.lr_decay)
        if v > 1:
            raise ValueError(f"lr_decay must be in (0, 1], got {v}")
        check_int("decay_every", self.decay_every, minimum=1)

    def _lr(self, epoch):
        """The step of update ``epoch`` (0-based) under the step decay (module docstring)."""
        return float(self.lr) * float(self.lr_decay) ** (int(epoch) // int(self.decay_every))

    def _check_params(self, objective):
        check_positive("lr", self.lr)
        self._check_decay()
        for name in ("beta", "gamma"):
            v = check_positive(name, getattr(self, name))
            if v > 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        check_positive("gamma_prime", self._gp(), allow_zero=True)
        check_positive("smoothing", self._lam(), allow_zero=True)
        if self.step_rule not in _UPDATES:
            raise ValueError(f"step_rule must be one of {_UPDATES}, got {self.step_rule!r}")
        if self.groups_per_batch is not None:
            check_int("groups_per_batch", self.groups_per_batch, minimum=1)
        check_int("per_group", self.per_group, minimum=1)
        check_int("objective_batch", self.objective_batch, minimum=1)
        if not np.isfinite(float(self.s0)):
            raise ValueError(f"s0 must be finite, got {self.s0!r}")

    def _gp(self):
        return float(self.gamma_prime) if self._gamma_prime else 0.0

    def _lam(self):
        return float(self.smoothing) if self._smooth else 0.0

    def _check_objective(self, objective):
        if objective.family == "group_risk" and not objective.has_s:
            raise ValueError(f"{self.name} solves group risks of the CVaR form (CVaR, mean, max "
                             "loss over groups, shift_cost = 0); use 'lbfgs' for other spectra")
        if self._smooth_outer_only and not (objective.family == "constrained"
                                            and objective.penalty == "squared_hinge"):
            raise ValueError(f"{self.name} needs a smooth outer function: a constrained "
                             "objective with penalty='squared_hinge'")

    def _sizes(self, objective):
        m = objective.m
        b1 = min(m, 8) if self.groups_per_batch is None else int(self.groups_per_batch)
        if b1 > m:
            raise ValueError(f"groups_per_batch={b1} exceeds the number of outer indices ({m})")
        b0 = int(self.objective_batch) if objective.direct_rows.size else 0
        return b1, int(self.per_group), b0

    def _steps(self, objective):
        b1, b2, b0 = self._sizes(objective)
        return max(1, objective.n // (b1 * b2 + b0))

    def passes_per_update(self, objective):
        b1, b2, b0 = self._sizes(objective)
        return self._steps(objective) * (b1 * b2 + b0) / objective.n

    def draw_indices(self, objective, state):
        """One row per step: ``[B1 outer indices, B1 * B2 rows, B0 objective rows]``."""
        b1, b2, b0 = self._sizes(objective)
        T = self._steps(objective)
        rng = state.rng
        out = np.empty((T, b1 + b1 * b2 + b0), dtype=np.int64)
        ptr, rows = objective.outer_ptr, objective.outer_rows
        sizes = objective.outer_sizes
        for t in range(T):
            gids = rng.choice(objective.m, size=b1, replace=False)
            out[t, :b1] = gids
            pos = ptr[gids][:, None] + (rng.random((b1, b2)) * sizes[gids][:, None]).astype(
                np.int64)
            out[t, b1:b1 + b1 * b2] = rows[pos.ravel()]
            if b0:
                out[t, b1 + b1 * b2:] = objective.direct_rows[
                    rng.integers(0, objective.direct_rows.size, size=b0)]
        return out

    def _split(self, objective, indices):
        b1, b2, b0 = self._sizes(objective)
        idx = np.ascontiguousarray(np.atleast_2d(indices), dtype=np.int64)
        return (np.ascontiguousarray(idx[:, :b1]),
                np.ascontiguousarray(idx[:, b1:b1 + b1 * b2]),
                np.ascontiguousarray(idx[:, b1 + b1 * b2:]))

    def _common(self, objective, epoch=0):
        if objective.family == "group_risk":
            kind, par = 0, 1.0 / objective.tail_fraction
        else:
            kind, par = objective.kind, float(objective.rho)
        return (objective.loss.code, objective.X, objective.y, objective.reg,
                objective.outer_offsets, kind, par, self._lam(), float(self.gamma), self._gp(),
                bool(objective.has_s), self._lr(epoch), float(self.beta),
                self.step_rule == "adam", 0.999, 1e-8)

    # -- state ----------------------------------------------------------------------------
    def _init(self, objective, W, rng, s0=None):
        s = float(self.s0 if s0 is None else s0) if objective.has_s else 0.0
        m = objective.m
        return FCCOState(coef=W, epoch=0, rng=rng, s=s, coef_prev=W.copy(), s_prev=s,
                         u=np.zeros(m), seen=np.zeros(m, dtype=np.int64),
                         v=np.zeros_like(W), m2=np.zeros_like(W), vs=0.0, m2s=0.0,
                         counters=np.zeros(1, dtype=np.int64))

    def _pass(self, objective, state, indices):
        gids, rows, drows = self._split(objective, indices)
        a = copy_arrays(state, "coef", "coef_prev", "u", "seen", "v", "m2", "counters")
        s, sp = np.array([state.s]), np.array([state.s_prev])
        vs, m2s = np.array([state.vs]), np.array([state.m2s])
        _k._pass_single(*self._common(objective, state.epoch), gids, rows, drows, a["coef"],
                        a["coef_prev"], s, sp, a["u"], a["seen"], a["v"], a["m2"], vs, m2s,
                        a["counters"])
        return state._replace(epoch=state.epoch + 1, s=float(s[0]), s_prev=float(sp[0]),
                              vs=float(vs[0]), m2s=float(m2s[0]), **a)

    def _finite(self, state):
        return bool(np.all(np.isfinite(state.coef)) and np.isfinite(state.s))

    def point(self, objective, state):
        """``(coef, aux)`` with ``aux`` NaN: the point is scored by the profile (module
        docstring); the tracked ``s`` is ``state.s``."""
        return self._iterate(state), (float("nan"),) * objective.n_aux

    def _result(self, objective, state, elapsed, trace, diverged, message, progress):
        res = super()._result(objective, state, elapsed, trace, diverged, message, progress)
        if objective.n_aux and hasattr(state, "s"):
            res.extra["s"] = float(state.s)
        return res


@register
class SONX(_FCCOSolver):
    """SONX: moving-average tracking and a subgradient of the outer hinge (module docstring).
    Parameters: ``lr``, ``beta`` (momentum rate), ``gamma``, ``step_rule``, batch sizes, ``s0``,
    ``lr_decay`` / ``decay_every``, ``random_state``."""

    name = "sonx"
    _gamma_prime = False
    _smooth = False

    def __init__(self, lr=0.05, beta=0.1, gamma=0.1, step_rule="momentum", groups_per_batch=None,
                 per_group=16, objective_batch=32, s0=0.0, lr_decay=1.0, decay_every=1,
                 random_state=None):
        self._store(locals())


@register
class SONEX(_FCCOSolver):
    """SONEX (Algorithm 1): MSVR tracking, Moreau-smoothed outer function (``smoothing``),
    momentum or Adam-type update (module docstring)."""

    name = "sonex"


@register
class SOX(SONX):
    """SOX for the squared-hinge penalty of constrained learning (a smooth outer function)."""

    name = "sox"
    _smooth_outer_only = True


@register
class ALEXR2(_FCCOSolver):
    """ALEXR2 (Algorithm 2): ``inner_steps`` ALEXR steps (MSVR-form dual update with
    ``gamma`` and ``theta``, step ``inner_lr``, prox parameter ``nu``) per outer momentum /
    Adam step of size ``lr`` (module docstring). One update is one pass of inner steps."""

    name = "alexr2"

    def __init__(self, lr=0.5, inner_lr=0.05, nu=0.1, inner_steps=5, beta=0.1, gamma=0.1,
                 theta=0.2, smoothing=0.001, step_rule="momentum", groups_per_batch=None,
                 per_group=16, objective_batch=32, s0=0.0, lr_decay=1.0, decay_every=1,
                 random_state=None):
        self._store(locals())

    def _gp(self):
        return float(self.gamma) * float(self.theta)

    def _check_params(self, objective):
        check_positive("theta", self.theta)
        check_positive("inner_lr", self.inner_lr)
        check_positive("nu", self.nu)
        check_int("inner_steps", self.inner_steps, minimum=1)
        super()._check_params(objective)

    def _init(self, objective, W, rng, s0=None):
        s = float(self.s0 if s0 is None else s0) if objective.has_s else 0.0
        m = objective.m
        return ALEXR2State(coef=W, epoch=0, rng=rng, s=s, z=W.copy(), z_prev=W.copy(), zs=s,
                           zs_prev=s, u=np.zeros(m), seen=np.zeros(m, dtype=np.int64),
                           v=np.zeros_like(W), m2=np.zeros_like(W), vs=0.0, m2s=0.0,
                           counters=np.zeros(2, dtype=np.int64))

    def _pass(self, objective, state, indices):
        gids, rows, drows = self._split(objective, indices)
        a = copy_arrays(state, "coef", "z", "z_prev", "u", "seen", "v", "m2", "counters")
        s, zs, zsp = np.array([state.s]), np.array([state.zs]), np.array([state.zs_prev])
        vs, m2s = np.array([state.vs]), np.array([state.m2s])
        _k._pass_alexr2(*self._common(objective, state.epoch), float(self.inner_lr), float(self.nu),
                        int(self.inner_steps), gids, rows, drows, a["coef"], s, a["z"],
                        a["z_prev"], zs, zsp, a["u"], a["seen"], a["v"], a["m2"], vs, m2s,
                        a["counters"])
        return state._replace(epoch=state.epoch + 1, s=float(s[0]), zs=float(zs[0]),
                              zs_prev=float(zsp[0]), vs=float(vs[0]), m2s=float(m2s[0]), **a)


@register
class OOA(_FCCOSolver):
    """OOA: stochastic primal-dual baseline for group DRO with the CVaR over groups (module
    docstring). Parameters: ``lr`` (primal), ``dual_lr``, batch sizes, ``lr_decay`` /
    ``decay_every`` (of ``lr`` only), ``random_state``."""

    name = "ooa"
    families = ("group_risk",)

    def __init__(self, lr=0.05, dual_lr=0.05, groups_per_batch=None, per_group=16,
                 lr_decay=1.0, decay_every=1, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        check_positive("lr", self.lr)
        check_positive("dual_lr", self.dual_lr)
        self._check_decay()
        if self.groups_per_batch is not None:
            check_int("groups_per_batch", self.groups_per_batch, minimum=1)
        check_int("per_group", self.per_group, minimum=1)

    def _sizes(self, objective):
        m = objective.m
        b1 = min(m, 8) if self.groups_per_batch is None else int(self.groups_per_batch)
        if b1 > m:
            raise ValueError(f"groups_per_batch={b1} exceeds the number of groups ({m})")
        return b1, int(self.per_group), 0

    def _init(self, objective, W, rng):
        return OOAState(coef=W, epoch=0, rng=rng, q=np.full(objective.m, 1.0 / objective.m))

    def _pass(self, objective, state, indices):
        gids, rows, _ = self._split(objective, indices)
        a = copy_arrays(state, "coef", "q")
        cap = 1.0 / (objective.tail_fraction * objective.m)
        _k._pass_ooa(objective.loss.code, objective.X, objective.y, objective.reg, cap,
                     self._lr(state.epoch), float(self.dual_lr), gids, rows, a["coef"], a["q"])
        return state._replace(epoch=state.epoch + 1, **a)

    def _finite(self, state):
        return bool(np.all(np.isfinite(state.coef)))
