"""Exact full-batch solver for the spectral family: semismooth Newton + a duality-gap certificate.

Problem (one output, ``K = 1``; a smooth loss with a second derivative: squared, logistic)::

    F(w) = max_{q in P(sigma)} sum_i q_i l_i(w) - nu D(q) + 1/2 sum_j reg_j w_j^2

with ``P(sigma)`` the permutahedron of the spectrum, ``reg_j > 0`` (``mu = l2_reg``, or
``mu / s_j^2`` on the estimators' standardised design) and the intercept (if any) not
penalised.

**Certificate.** For any ``q`` in ``P(sigma)``, weak duality gives ``F* >= min_w G_q(w) - nu D(q)``
with ``G_q(w) = sum_i q_i l_i(w) + 1/2 sum_j reg_j w_j^2``. ``G_q - 1/2 sum_j reg_j w_j^2`` is
convex in the penalised coordinates once the intercept is minimised out (partial minimisation
of a jointly convex function keeps it convex), so for any point ``w`` whose intercept
minimises ``G_q(w, .)``::

    min G_q >= G_q(w) - sum_j g_j^2 / (2 reg_j),   g = grad_w G_q(w)

(with a non-uniform ``reg`` the slack must use each ``reg_j``: ``|g|^2 / (2 mu)`` would
overstate the bound where ``reg_j < mu``). :func:`newton_bound` takes one Newton step on
``G_q`` first, which removes most of that slack.

:func:`dual_bound` moves the intercept to that minimiser (a 1-D Newton solve in ``O(n)`` per
step, to ``|dG/db| <= 1e-13`` of the loss-derivative scale) and returns this lower bound; the
gap ``F(w) - bound`` is then a proof of accuracy that needs no reference optimum. For
``nu = 0`` the weights ``q(w)`` of the oracle split tied losses arbitrarily, and their gradient
need not vanish at the minimiser; :func:`certify` also tries the chi-square-smoothed weights
``q_nu(w)`` (any ``q`` in ``P(sigma)`` is a valid dual point) on a grid of ``nu`` and keeps the
best bound.

**Solver.** :func:`newton` iterates ``d = -H^-1 g`` with ``g`` the (sub)gradient at the oracle's
``q`` and ``H = X' diag(q l'') X + diag(reg)`` (the Hessian of ``G_q``, exact on each piece where
the order of the losses is fixed; ``F`` is piecewise smooth), an Armijo backtracking line search
on ``F`` itself, and stops when the certified relative gap ``(F - bound) / max(|F|, 1e-12)`` is
at most ``rtol``, or reports that it stalled (no decrease along ``d``) with the gap reached.
Each step costs one weighted Gram matrix ``X' diag(h) X`` (only the rows with ``h > 0``: the
tail of a CVaR; the gradient ``X' (q l')`` is summed in the same pass over the rows when the
next step is certain to be taken), a ``p x p`` Cholesky solve and a few oracle calls (one sort
of the losses per point, shared by the oracle and the Hessian's pools), so it is meant for
``p`` up to a few thousand (``MAX_FEATURES``).

**Box spectra (CVaR).** After each stage :func:`newton` tries the exact finish of
:mod:`riskopt.objectives._crossover` (a window SQP that finds the tie set of the ``nu = 0``
optimum) and ends with its point when that point is certified within the goal: on
``benchmarks/estimator_vs_sklearn.py`` the synthetic CVaR 0.1 fit went from 16 Newton steps to
4 (2 of the first stage, then the crossover tried early: 2 model solves, certified to 3e-13)
and adult CVaR 0.5 from 48 to 15 (the early try fails after 2 model solves, the first stage
ends after 12 steps and the crossover needs 1). On a small design (its window a large share
of the samples and few columns, :data:`XO_FIRST_WINDOW_SHARE`) it runs first, from the ridge
start. Each model
solve counts as a Newton step (one weighted Gram matrix).
"""
import numpy as np
from scipy.linalg import LinAlgError

from .._kernels import oracles as _ko
from . import _crossover as _xo
from ._newton_hessian import (POOL_BLOCK, _pool_members, _pool_sums, _pools,  # noqa: F401
                              _smoothed_hessian)
from ._dual import (GRAM_BLOCK, SPARSE_ROWS, _box_spectrum, _from_base,  # noqa: F401
                    _intercept_index, _losses_derivs_z, _plain_gram, _scaled_sq, _xt_sparse,
                    _xt_vec, chol_solve, curvature, dual_bound, free_gradient, weighted_gram)
from ._newton_cert import (BOX_MAX_FREE, BOX_WINDOWS, CERT_NUS, _box_dual,  # noqa: F401
                           certify, newton_bound)

#: widest design (columns) the Newton solver accepts: one ``p x p`` Gram matrix per step
MAX_FEATURES = 2000
#: shift cost divisor between continuation stages (30, 100 and 1000 were no faster on the
#: synthetic CVaR 0.1 of ``benchmarks/estimator_vs_sklearn.py``, 14-18 steps against 16, and
#: left adult CVaR 0.5 uncertified at 7e-6 after 53 steps, against 48 steps to 1.6e-7)
NU_FACTOR = 10.0
#: first shift cost of the continuation, per unit of the mean loss at the start
NU0_PER_LOSS = 1e-2
#: the extra dual point of a continuation stage at shift cost ``nu``: the chi-square weights at
#: ``nu * CAND_NU_PER_STAGE`` (``newton``)
CAND_NU_PER_STAGE = 1e-2


def applicable(objective):
    """Why :func:`newton` cannot run on ``objective`` (``""`` when it can)."""
    if getattr(objective, "K", 1) != 1:
        return "more than one output (K > 1)"
    if curvature(objective.loss, np.zeros(1), np.zeros(1)) is None:
        return f"no second derivative for the {objective.loss.name} loss"
    if not objective.l2_reg > 0:
        return "l2_reg = 0 (no strong convexity: no certificate)"
    unpen = np.asarray(objective.reg) <= 0
    if objective.fit_intercept:
        unpen[-1] = False
    if np.any(unpen):
        return "a coefficient without an l2 penalty (no strong convexity: no certificate)"
    if objective.p > MAX_FEATURES:
        return f"{objective.p} columns > {MAX_FEATURES} (one p x p Gram matrix per step)"
    if objective.sample_weight is not None:
        return "non-uniform sample weights"
    return ""


#: relative rounding level of F's evaluation (sums over n samples of sorted, updated
#: losses): a Newton stage whose predicted decrease is below it is solved to float64 accuracy
NOISE_PER_F = 1e-11


#: the first stage of a continuation (``nu = nu0``, the objective's own shift cost 0, not a box
#: spectrum), once one of its steps backtracked, steers its Newton steps by the Hessian of
#: ``F_nu`` at this many times its ``nu`` (its gradient and line search stay ``F_nu``'s). ``nu0``
#: is far below the smoothing at which the chi-square oracle's pools stop being microscopic (a
#: pool forms where the sorted losses' spacing is below ``2 nu`` times the spectrum's slope), so
#: ``F_nu``'s exact Hessian misses most of the curvature its pools add along a step (1.5-4x on
#: compas: the backtracking's :data:`BACKTRACK_MIN`); a wider smoothing's Hessian averages it.
#: Newton steps / oracle calls (``benchmarks/newton_steps.py``, ``HESSIAN_NU_FIRST=1`` against
#: this): compas (the default RiskClassifier) 9 / 17 -> 7 / 14, its Newton call 12.2 -> 9.7 ms
#: CPU; the other cases of that script unchanged. From the first step instead (not only after a
#: backtrack): compas 6 / 16, concrete ESRM 1 5 -> 3 steps, kin8nm extremile 2 4 -> 3, but adult
#: ESRM 1 (full steps) 11 -> 18 oracle calls, ~1.2x its Newton call, and the logistic compas
#: with extremile 2 (``w* = 0``, massive ties, where the wider smoothing overstates the
#: curvature) 23 -> 30 steps. Box spectra (CVaR) keep ``F_nu``'s Hessian: the wider weights'
#: support adds rows to the Gram matrix (adult CVaR 0.5 ~1.4x its Newton call from the first
#: step; concrete's default fit 7 -> 5 steps) and the logistic compas CVaR 0.1 (``w* = 0``) went
#: 26 -> 36 steps
HESSIAN_NU_FIRST = 10.0


#: a box spectrum's (CVaR) smoothed stages take the chi-square weights from the selection
#: oracle (``oracle_select.box_select_weights``: a few O(n) passes for one scalar) instead of
#: a sort and the PAV, and the Hessian's one pool (the weights strictly inside the box) from a
#: mask (``_newton_hessian._pools``). The same weights to rounding (the smoothed maximiser is
#: unique; law_school's three stage oracle calls: 8e-18 apart); where the selection declines
#: (a ``nu`` too small for its one-scalar form) the sort serves as before. One smoothed oracle
#: call on law_school (16,638 losses, one process): 291 -> 132 us (minimum of 200)
BOX_SELECT = True


#: a stage of a nu = 0 objective with an ``accept`` ends after a full step when the next
#: step's decrease of the smoothed objective, predicted from the last two full steps (Newton's
#: quadratic rate: ``dec^2 / dec_prev``), is at most this share of ``accept``; its certificate
#: (whose Newton step on ``G_q`` is also a candidate point) decides whether the run ends there
#: (``benchmarks/estimator_vs_sklearn.py``: synthetic ESRM 1 and extremile 2 2 steps instead of
#: 3, certified to 1.6e-7 and 4.8e-7; adult ESRM 1 7 instead of 8. The earlier rule, the
#: step's own decrease at most ``accept``, waited one step more) and the Newton decrement at
#: the new point with the last step's Hessian agrees (:data:`LOOSE_DECREMENT_PER_ACCEPT`; on
#: compas the prediction from steps 3-4, 2.8e-7, was wrong by far: the stage's next steps
#: lowered F_nu by 5.7e-5, its certificate failed at 1.5e-4 and the stage ran again. The
#: decrement, 1.1e-4, sees it: the fit's Newton call 23.7 -> 20.2 ms CPU, one process, loaded)
STAGE_DEC_PER_ACCEPT = 1.0
#: ... and when that early end was not certified, the stage goes on to a second early end: the
#: next step's Newton decrement (``-g'd / 2``, the decrease the Hessian predicts for a full step)
#: at most this share of ``accept`` ``|F_nu|``; then to the gradient test (the first end's
#: confirmation uses the same share). On tie-heavy data the
#: curvature of F_nu along a step grows 1.5-2.7x the exact local Hessian's within 1% of it, as
#: the oracle's pools change, so the decrement overstates the stage's remaining decrease and
#: the end is safe. compas, the default RiskClassifier (benchmarks/first_minutes.py), with
#: :func:`_backtrack`: 13 Newton steps -> 9, certified to 2.7e-7 (stop 37's rule, two steps in
#: a row that lowered F_nu by at most 1e-2 accept, waited for 5.6e-9; stop 36's 24 -> 16 was
#: that rule's)
LOOSE_DECREMENT_PER_ACCEPT = 1.0
#: the gradient of the next step is formed with its Hessian (one pass over the rows) when
#: the predicted decrease is above this share of ``rtol`` ``|F|``: the gradient test is then
#: not expected to pass (if it does, that Hessian is wasted: a cost, not a wrong step)
FUSE_PRED_PER_RTOL = 10.0
#: stage-end crossovers tried at most (each failure costs up to ``_crossover.MAX_OUTER`` steps)
XO_MAX_FAILS = 3
#: the first stage tries the crossover once after a full Newton step that lowered the smoothed
#: objective by at most this share (synthetic CVaR 0.1: the second step, 8.6e-3; the crossover
#: from there is certified after 2 model solves, as from the stage's end after 4 steps; adult
#: CVaR 0.5 reaches it at its sixth step, where the early try is not certified) ...
EARLY_DEC = 1e-2
#: ... with at most this many model solves and no window growth (adult CVaR 0.5 from its first
#: steps needed 6-8 solves with a window grown to 6,465: left to the stage's end)
EARLY_STEPS = 2
#: ... of which only the last one's point is certified (``box_newton``'s ``certify_last``)
EARLY_CERTIFY_LAST = True
#: ... and at most this many active-set changes per model solve, per design column
EARLY_QP_PER_COLUMN = 20.0
#: from the ridge start (``mean_start``: the squared loss from ``w = 0``) the crossover runs
#: first, before any stage (at most ``_crossover.MAX_OUTER`` model solves, no window growth),
#: when its window holds at least this share of the samples (``_crossover.window_share``: a
#: small design, ``n <= 8 half``, e.g. ``n <= 1,152`` for 9 columns: the model linearises most
#: losses and freezes few). Not certified within the goal: its bound is kept and the stages
#: start from its point when it lowered ``F``. ``benchmarks/newton_steps.py`` (results in
#: ``benchmarks/results/first_minutes/stop40/newton_steps``; steps / CPU median of the Newton
#: call, one process, loaded; this rule against off): concrete (the default RiskRegressor)
#: 7 / 3.20 ms -> 4 / 2.07 ms; concrete CVaR 0.05, 0.2, 0.01 and MaxLoss 9, 12, 7, 12 -> 5, 4,
#: 4, 5 steps; synthetic 800 x 8, 1,000 x 8, 1,200 x 12, 3,000 x 23, 500 x 50: 11, 5, 5, 14,
#: 24 -> 4, 4, 4, 4, 5 steps (5.12 -> 1.90, 2.44 -> 1.59, 2.39 -> 1.92, 10.77 -> 4.42, 17.83 ->
#: 10.65 ms); each certified; the larger designs unchanged. With the rule "the window reaches
#: the top rank" instead (a 4 % window), kin8nm CVaR 0.01 went 6 -> 7 steps, 4.3 -> 8.3 ms,
#: and law_school CVaR 0.01 7 -> 9: the model's first steps backtracked
XO_FIRST_WINDOW_SHARE = 0.25
#: ... and at most this many design columns (a model solve's work grows like ``p^4``,
#: ``_crossover.MAX_FEATURES``): without this cap (same results file) synthetic 1,500 x 64
#: took 5 steps against 14 but 18.56 ms against 15.24, and 1,000 x 100 6 against 24 but 79.13
#: ms against 45.62 (fewer, dearer steps)
XO_FIRST_MAX_COLUMNS = 51
#: ... certifying the points of its model solves from this one on (``box_newton``'s
#: ``certify_from``; one ``dual_bound`` less per fit): its first point, from a vertex model at
#: the ridge start, was within the goal (1e-6) in none of the 6 default regression fits of
#: ``benchmarks/first_minutes.py`` nor concrete CVaR 0.05 / 0.2 (``box_newton(log=)`` from the
#: ridge start: relative gaps 7.9e-3 to 4.7e2; a first point within the goal costs one more
#: model solve, from its own weights)
XO_FIRST_CERTIFY_FROM = 2
#: ... and only on tall designs (rows >= 4 x columns): on a 27 x 30 design (sklearn's
#: sample-weight equivalence check) the crossover-first start left Newton stalled at a
#: relative gap 3.5e-7 (L-BFGS finished), with OpenBLAS's Prescott kernels
XO_FIRST_MIN_ROWS_PER_COLUMN = 4


def _backtrack(t, slope, rise):
    """The next trial step of the Armijo search after ``t`` failed: the minimiser of the
    quadratic through ``F(0)``, the slope ``slope`` (``< 0``) and ``F(t) = F(0) + rise``,
    kept within ``[BACKTRACK_MIN t, 0.5 t]`` (safeguarded interpolation, Nocedal & Wright,
    Sec. 3.5). On tie-heavy data the curvature of ``F_nu`` along the Newton step exceeds the
    local Hessian's 1.5-4x (:data:`LOOSE_DECREMENT_PER_ACCEPT`): halving overshoots the
    minimum along the line, the interpolation lands near it."""
    if not rise < np.inf:  # (an overflow or a NaN along the step: halve)
        return 0.5 * t
    tq = -slope * t * t / (2.0 * (rise - slope * t))  # (rise > 1e-4 t slope: a positive divisor)
    return min(max(tq, BACKTRACK_MIN * t), 0.5 * t)


#: the smallest factor of one backtracking step (:func:`_backtrack`). Newton steps / smoothed
#: oracle calls of default fits (``RiskClassifier`` on compas, ``RiskRegressor`` on concrete)
#: and other risks, halving -> interpolation with this floor (0.1, the textbook's, in
#: brackets; compas with the decrement rule): concrete 11 / 19 -> 7 / 8 (9 / 12), compas
#: 16 / 28 -> 9 / 14 (9 / 14), compas CVaR 0.1 29 / 50 -> 26 / 40 (26 / 40), adult CVaR 0.5
#: 15 / 26 -> 15 / 20 (17 / 25), concrete ESRM 1 7 / 8 -> 5 / 5, compas extremile 2 (w* ~ 0,
#: kinks: the quadratic model is poor along the line) 19 / 78 -> 23 / 60 (33 / 90); kin8nm
#: extremile 2, adult ESRM 1 and the synthetic fits unchanged (full steps)
BACKTRACK_MIN = 0.25


def _decrement(H, g):
    """Half the squared Newton decrement ``g' H^-1 g / 2``: the decrease a full Newton step
    with the Hessian ``H`` (positive definite) predicts; ``inf`` when ``H`` is ``None`` or
    cannot be factorised."""
    if H is None:
        return np.inf
    try:
        return 0.5 * float(g @ chol_solve(H, g))
    except (LinAlgError, ValueError):
        return np.inf


def _crossover(objective, W, z, bound, rel_goal, budget, max_grow=None, qp_iter=None,
               start=None, certify_last=False, certify_from=1):
    """``(point, steps, stuck, result)``: :func:`riskopt.objectives._crossover.box_newton`
    from ``W`` with at most ``budget`` model solves (``start``: its losses, derivatives, ``F``
    and exact weights at ``W``, when known); ``point`` its ``result`` when certified within
    ``rel_goal`` (with the better of its bound and ``bound``), else ``None``; ``stuck`` when
    the crossover cannot run or a model solve did not finish (``result`` is ``None`` when it
    cannot run)."""
    xo = _xo.box_newton(objective, W, z, accept=rel_goal, max_grow=max_grow, qp_iter=qp_iter,
                        max_outer=min(_xo.MAX_OUTER, budget), start=start,
                        certify_last=certify_last, certify_from=certify_from)
    if xo is None:
        return None, 0, True, None
    ok = xo["value"] - max(bound, xo["bound"]) <= rel_goal * max(abs(xo["value"]), 1e-12)
    return (xo if ok else None), xo["steps"], xo["stuck"], xo


def _mean_start(objective, W, z):
    """``(W1, z1)``: one Newton step from ``W`` (predictions ``z``) on the mean problem
    ``mean_i l_i(w) + 1/2 sum_j reg_j w_j^2`` (for the squared loss its minimiser, ridge
    regression, up to the float32 Gram matrix; one IRLS step for the logistic loss), or
    ``(None, None)`` when that system cannot be solved."""
    n = objective.n
    _, der = _losses_derivs_z(objective, z)
    H, g = weighted_gram(objective.X, curvature(objective.loss, objective.y, z) / n, r=der / n)
    H[np.diag_indices_from(H)] += objective.reg + 1e-12 * max(1.0, float(np.trace(H)) / len(W))
    g += objective.reg * W
    if not (np.all(np.isfinite(H)) and np.all(np.isfinite(g))):
        return None, None
    try:
        W1 = W + chol_solve(H, -g)
    except (LinAlgError, ValueError):
        return None, None
    return W1, np.asarray(objective.X @ W1, dtype=np.float64).ravel()


def newton(objective, W0, rtol=1e-8, max_iter=200, nu0=None, nu_min=1e-14, accept=None,
           mean_start=False):
    """Exact solver (module docstring): Newton on the chi-square-smoothed problems ``F_nu``,
    ``nu`` divided by 10 per stage from ``nu0`` (default: ``NU0_PER_LOSS`` times the mean loss at
    ``W0``), each stage warm-started, until the certified relative gap on ``F`` (the
    objective's own ``nu``) is at most ``rtol``. For an objective with ``nu > 0`` the stages stop
    at that ``nu``. The bound after a stage is the best of the stage's weights
    (:func:`dual_bound`) and, at ``nu = 0``, the weights of a ``CAND_NU_PER_STAGE`` smaller
    smoothing at the stage's point (:func:`newton_bound`, whose Newton step on ``G_q`` gives a
    second candidate point, kept when it lowers ``F``): the 200,000 x 50 synthetic ESRM and
    extremile fits of ``benchmarks/estimator_vs_sklearn.py`` are certified after the first
    stage (2 Newton steps with ``accept``). For a box spectrum (CVaR) the exact crossover is
    tried in the first stage and after each stage (module docstring), and before any stage
    from the ridge start of a small design (:data:`XO_FIRST_WINDOW_SHARE`).
    ``mean_start``: first one Newton step on the mean problem (:func:`_mean_start`; counted
    as a step), whose point is the start when it lowers ``F`` (the Newton solver from
    ``w = 0`` with the squared loss, ridge regression: on ``benchmarks/first_minutes.py``
    law_school went from 12 steps to 5, concrete from 14 to 11, the synthetic CVaR 0.1 fits
    from 5-6 to 4-5).
    ``accept`` (``>= rtol``, optional): the run also ends after a stage whose certified gap is
    at most ``accept`` (each stage is solved to the ``rtol`` gradient test, or at ``nu = 0``
    until the predicted next decrease is at most ``STAGE_DEC_PER_ACCEPT accept``; the
    estimators' default fit on adult, CVaR 0.5, went from 88 to 48 steps in
    ``benchmarks/estimator_vs_sklearn.py``); the result then has ``converged = False`` and
    ``rel_gap <= accept``.

    Returns a dict: ``coef``, ``value``, ``bound``, ``gap`` (``value - bound``), ``rel_gap``,
    ``n_iter`` (Newton steps), ``converged`` (``rel_gap <= rtol``), ``message``, ``dual_nu``,
    ``value0`` (``F(W0)``), ``weights`` (the oracle's ``q`` at ``coef``) and ``z`` (the
    predictions ``X @ coef``, to rounding).
    """
    why = applicable(objective)
    if why:
        raise ValueError(f"Newton solver not applicable: {why}")
    X = objective.X
    reg = objective.reg
    W = np.asarray(W0, dtype=np.float64).reshape(-1).copy()
    # the estimators start at w = 0: no product (the designs are linear)
    z = np.asarray(X @ W, dtype=np.float64).ravel() if np.any(W) else np.zeros(objective.n)
    target_nu = float(objective.nu)
    ell, der = _losses_derivs_z(objective, z)
    F0, qF = objective.risk_weights(ell)
    F0 += objective._reg_value(W.reshape(-1, 1))
    if not np.isfinite(F0):
        raise FloatingPointError(f"F(w0) = {F0}: the Newton solver needs a finite start")
    it = 0
    F = F0  # F at the current W (set at the end of each stage); qF its weights (None: unknown)
    best_F, best_W = F0, W.copy()  # the start may beat every stage (a tie-heavy w0 = 0)
    started = False
    if mean_start and max_iter > 1:
        it += 1
        W1, z1 = _mean_start(objective, W, z)
        if W1 is not None:
            ell1, der1 = _losses_derivs_z(objective, z1)
            F1, q1 = objective.risk_weights(ell1)
            F1 += objective._reg_value(W1.reshape(-1, 1))
            if F1 < F0:
                W, z, ell, der, F, qF = W1, z1, ell1, der1, F1, q1
                best_F, best_W = F, W.copy()
                started = True
    if nu0 is None:
        nu0 = NU0_PER_LOSS * max(float(np.mean(np.abs(ell))), 1e-8)
    nu = max(nu0, target_nu)
    bound, gap, nu_used = -np.inf, np.inf, None
    message = ""
    q = np.empty(objective.n)
    eps_ridge = 1e-12
    converged = False
    stale, best_rel = 0, np.inf
    div = objective.div if target_nu > 0 else _ko.CHI2

    plan = objective._selection_plan() if target_nu == 0 else None
    box = target_nu == 0 and _box_spectrum(objective.sigma)
    # a box spectrum's chi-square weights by selection (BOX_SELECT); its Hessian's pool is then
    # the samples strictly inside the box (_newton_hessian._pools: no sort either)
    bplan = plan if box and BOX_SELECT and div == _ko.CHI2 else None

    def smoothed(zv, Wv, nuv, qv):
        ellv, derv = _losses_derivs_z(objective, zv)
        val = None if bplan is None else _ko.box_select_weights(ellv, objective.sigma, bplan,
                                                               nuv, div, qv)
        if val is None:
            val, srtv = _ko.risk_weights_sorted(ellv, objective.sigma, nuv, div, qv)
        else:
            srtv = None
        return val + objective._reg_value(Wv.reshape(-1, 1)), ellv, derv, srtv


    def exact(zv, Wv):
        """F at Wv (predictions zv), its weights, losses and their sort (None where the
        objective's oracle selects instead of sorting): the sort serves the next oracle call
        on the same losses (the certificate's weights)."""
        ellv = _losses_derivs_z(objective, zv)[0]
        if plan is not None:
            (val, qv), srtv = objective.risk_weights(ellv), None
        else:  # objective.risk_weights' own oracle, keeping its sort
            qv = np.empty(objective.n)
            val, srtv = _ko.risk_weights_sorted(ellv, objective.sigma, target_nu,
                                                objective.div, qv)
        return val + objective._reg_value(Wv.reshape(-1, 1)), qv, ellv, srtv

    nu_first = nu

    def hessian(grad):
        """The Newton model at the current point of the stage (``stage``, ``nu``): the Hessian
        of ``F_nu`` (and with ``grad`` the loss part of its gradient); in the first stage of a
        continuation (not a box spectrum), once a step of it backtracked, the Hessian of
        ``F_(HESSIAN_NU_FIRST nu)`` instead."""
        if target_nu != 0 or box or nu != nu_first or not wide or HESSIAN_NU_FIRST == 1.0:
            return _smoothed_hessian(stage, z, q, der, nu, ell, srt, grad=grad, box=box)
        qh = np.empty_like(q)
        _ko.risk_weights_sorted(ell, objective.sigma, nu * HESSIAN_NU_FIRST, div, qh, srt)
        return _smoothed_hessian(stage, z, qh, der, nu * HESSIAN_NU_FIRST, ell, srt,
                                 grad=grad, qg=q)

    xo_hit, tried_early, loose, xo_fails = None, False, 2, 0
    if (box and started and it < max_iter and objective.p <= XO_FIRST_MAX_COLUMNS
            and XO_FIRST_MIN_ROWS_PER_COLUMN * objective.p <= objective.n
            and _xo.window_share(objective) >= XO_FIRST_WINDOW_SHARE):
        # a small design: the crossover from the ridge start, before any stage
        xo_hit, k, stuck, xo = _crossover(objective, W, z, bound, max(rtol, accept or rtol),
                                          max_iter - it, max_grow=0, start=(ell, der, F, qF),
                                          certify_from=XO_FIRST_CERTIFY_FROM)
        it += k
        xo_fails = XO_MAX_FAILS if stuck else xo_fails + (xo_hit is None)
        if xo_hit is None and xo is not None:
            # not certified within the goal: its bound holds, and the stages start from its
            # point when that lowered F
            if xo["bound"] > bound:
                bound, nu_used = xo["bound"], "crossover"
            if xo["value"] < F:
                W, z, F, qF = xo["coef"], xo["z"], xo["value"], xo["weights"]
                best_F, best_W = F, W.copy()
    while it < max_iter and not converged:
        if xo_hit is not None:
            break
        stage = objective if nu == target_nu else objective.with_shift(nu, div)
        Fs, ell, der, srt = smoothed(z, W, nu, q)
        g, H, H_last, stopped_loose, prev_dec = None, None, None, False, None
        wide = False
        for _ in range(20):
            it += 1
            if H is None:  # (else formed with g at the end of the last step)
                if g is None:
                    H, g = hessian(True)
                    g += reg * W
                else:
                    H = hessian(False)
            H[np.diag_indices_from(H)] += reg + eps_ridge * max(1.0, float(np.trace(H)) / len(reg))
            if not (np.all(np.isfinite(H)) and np.all(np.isfinite(g))):
                message = "non-finite gradient or Hessian (badly scaled data?)"
                break
            try:
                d = chol_solve(H, -g)
            except (LinAlgError, ValueError):
                try:
                    d = np.linalg.lstsq(H, -g, rcond=None)[0]
                except LinAlgError:
                    message = "the Newton system could not be solved"
                    break
            H_last, H = H, None
            slope = float(g @ d)
            if not slope < 0:
                break
            if (loose == 1 and target_nu == 0 and accept is not None
                    and -0.5 * slope <= LOOSE_DECREMENT_PER_ACCEPT * accept * abs(Fs)):
                # the second try (the first was not certified): the Newton decrement says the
                # stage's point is within accept of the stage's minimum (this step's Hessian
                # is formed but the step not taken)
                stopped_loose = True
                break
            Xd = np.asarray(X @ d, dtype=np.float64).ravel()
            t, accepted = 1.0, False
            q_new = np.empty_like(q)
            for _ in range(40):
                F_new, ell_new, der_new, srt_new = smoothed(z + t * Xd, W + t * d, nu, q_new)
                if F_new <= Fs + 1e-4 * t * slope:
                    accepted = True
                    break
                t = _backtrack(t, slope, F_new - Fs)
            if not accepted:
                break
            dec = Fs - F_new
            wide = wide or t < 1.0  # (the first stage's model, hessian(), from here on)
            W, z, Fs, ell, der, q, srt = (W + t * d, z + t * Xd, F_new, ell_new, der_new, q_new,
                                          srt_new)
            qF = None
            if (box and not tried_early and t == 1.0 and dec <= EARLY_DEC * abs(Fs)
                    and it < max_iter):
                # an early crossover from the first stage's point once its steps are full and
                # small: a fixed window, two model solves; the stage goes on if not certified
                tried_early = True
                xo_hit, k, _, _ = _crossover(objective, W, z, bound,
                                             max(rtol, accept or rtol),
                                          min(EARLY_STEPS, max_iter - it), max_grow=0,
                                          qp_iter=int(EARLY_QP_PER_COLUMN * objective.p),
                                          start=(ell, der, None, None),
                                          certify_last=EARLY_CERTIFY_LAST)
                it += k
                if xo_hit is not None:
                    break
            if it % 8 == 0:
                z = np.asarray(X @ W, dtype=np.float64).ravel()
                Fs, ell, der, srt = smoothed(z, W, nu, q)
            # the stage is solved when the Newton decrement is below the target accuracy, or
            # as far as float64 allows: a step had to backtrack while the predicted decrease
            # was at the rounding level of F (the gradient test then only measures noise)
            if dec <= 1e-15 * abs(Fs) or it >= max_iter or (
                    t < 1.0 and -slope <= NOISE_PER_F * abs(Fs)):
                break
            # the next full step's decrease, predicted from the last two (quadratic rate)
            pred = min(dec, dec * dec / prev_dec) if prev_dec else dec
            prev_dec = dec if t == 1.0 else None
            if (loose == 2 and accept is not None and target_nu == 0 and t == 1.0
                    and pred <= STAGE_DEC_PER_ACCEPT * accept * abs(Fs)):
                # converging fast, below the accepted gap, if the Newton decrement at the new
                # point with the last step's Hessian agrees (one pass over the rows for the
                # gradient): then the certificate
                g = _xt_vec(X, q * der) + reg * W
                if _decrement(H_last, g) <= LOOSE_DECREMENT_PER_ACCEPT * accept * abs(Fs):
                    stopped_loose = True
                    break
                H = hessian(False)  # (the next step's)
            # solved when the gradient's share of the bound (sum g^2 / 2 reg) is below the
            # target; the next step's Hessian comes with that gradient (one pass over the rows)
            # unless the predicted decrease says the test may pass
            elif pred > FUSE_PRED_PER_RTOL * rtol * abs(Fs):
                H, g = hessian(True)
                g += reg * W
            else:
                g = _xt_vec(X, q * der) + reg * W
            if _scaled_sq(g, reg) <= 0.2 * rtol * max(abs(Fs), 1e-12):
                break
        if xo_hit is None:  # (an early crossover's point ends the run below)
            z = np.asarray(X @ W, dtype=np.float64).ravel()  # z drifts: z + t X d updates
            F, qF, ell, srtF = exact(z, W)
            if F < best_F:
                best_F, best_W = F, W.copy()
        goal = max(rtol, accept or rtol) * max(abs(F), 1e-12)
        if (xo_hit is None and box and xo_fails < XO_MAX_FAILS and it < max_iter
                and not F - bound <= goal):
            # the exact crossover (objectives/_crossover.py) before the stage's own bound; not
            # tried again once its model got stuck (a massive tie: adult CVaR 0.1, w* = 0,
            # 15 stuck tries of 0.12 s) or it failed XO_MAX_FAILS times
            xo_hit, k, stuck, _ = _crossover(objective, W, z, bound, max(rtol, accept or rtol),
                                             max_iter - it, start=(ell, None, F, qF))
            it += k
            xo_fails = XO_MAX_FAILS if stuck else xo_fails + (xo_hit is None)
        if xo_hit is not None:  # (its point ends the run, below)
            break
        # certificate for the objective itself with the stage's weights (valid dual point), on
        # predictions recomputed from W
        pen = float(_ko._penalty(q, target_nu, objective.div)) if target_nu > 0 else 0.0
        lb, _ = dual_bound(objective, W, q, pen, z)
        if lb > bound:
            bound, nu_used = lb, nu
        if target_nu == 0 and not F - bound <= goal:
            # the weights of a 100x smaller smoothing at W with the exact minimum of their
            # G_q (one Newton step on G_q): the stage's point is often already optimal to the
            # goal, while the stage's own weights (smoothed) and the sum g^2 / 2 reg slack (reg
            # well below the curvature of G_q) certify it only a stage or two later. That step
            # is also a candidate point: kept when it lowers F (an extra Newton step for free)
            qc = np.empty(objective.n)
            _ko.risk_weights_sorted(ell, objective.sigma, nu * CAND_NU_PER_STAGE, _ko.CHI2, qc,
                                    srtF)
            lbc, W1, z1 = newton_bound(objective, W, qc, 0.0, z, point=True)
            if lbc > bound:
                bound, nu_used = lbc, nu * CAND_NU_PER_STAGE
            if W1 is not None:
                F1, q1, ell1, _ = exact(z1, W1)
                if F1 < F:
                    W, z, F, qF, ell = W1, z1, F1, q1, ell1
                    if F < best_F:
                        best_F, best_W = F, W.copy()
        converged = (F - bound) <= rtol * max(abs(F), 1e-12)
        if converged or nu <= max(target_nu, nu_min) or message:
            break
        if stopped_loose and not F - bound <= goal:
            # not certified after the early end: the same stage again, to the second early
            # end (LOOSE_DECREMENT_PER_ACCEPT), then to the gradient test (compas CVaR 0.1 and
            # extremile 2 stalled at 1.2e-6 / 5.7e-6 over the stages)
            loose -= 1
            continue
        loose = 2
        # the certificate's resolution: stop when two stages in a row did not halve the gap
        rel_now = (F - bound) / max(abs(F), 1e-12)
        stale = stale + 1 if rel_now > 0.5 * best_rel else 0
        best_rel = min(best_rel, rel_now)
        if stale >= 2:
            message = f"the certified gap stopped decreasing at {best_rel:.3g}"
            break
        if accept is not None and best_rel <= accept:
            message = f"within accept = {accept:g} after a stage"
            break
        nu = max(nu / NU_FACTOR, target_nu)
    if xo_hit is not None:  # certified within the goal: its point ends the run
        W, z, F, qF = xo_hit["coef"], xo_hit["z"], xo_hit["value"], xo_hit["weights"]
        if xo_hit["bound"] >= bound:
            bound, nu_used = xo_hit["bound"], "crossover"
        if F < best_F:
            best_F, best_W = F, W.copy()
        converged = (F - bound) <= rtol * max(abs(F), 1e-12)
        best_rel = (F - bound) / max(abs(F), 1e-12)
        message = "exact crossover (box spectrum)"
    if not converged and best_F < F:  # z (exact for W since the last stage end) moves with W
        W = best_W
        z = np.asarray(X @ W, dtype=np.float64).ravel()
        qF = None
    accepted = accept is not None and best_rel <= accept
    if not converged and not accepted:  # the dual grid (and the box dual point) at the end
        lb, gap_f, nu_f = certify(objective, W, z)
        if lb > bound:
            bound, nu_used = lb, nu_f
    if qF is None:  # F and its weights at the final (W, z)
        F, qF, _, _ = exact(z, W)
    gap = max(F - bound, 0.0)
    rel = gap / max(abs(F), 1e-12)
    converged = rel <= rtol
    if converged:
        message = "certified"
    elif accept is not None and rel <= accept:
        message = f"certified to a relative gap {rel:.3g}" + (f" ({message})" if message else "")
    else:
        message = (f"not certified: relative gap {rel:.3g} > {rtol:g} after {it} Newton steps"
                   + (f" ({message})" if message else ""))
    return {"coef": W, "value": float(F), "bound": float(bound), "gap": float(gap),
            "rel_gap": float(rel), "n_iter": it, "converged": bool(converged),
            "message": message, "dual_nu": nu_used, "value0": float(F0), "weights": qF,
            "z": z}
