"""Prospect step by step for the oracle tests (test_box_oracle, test_hull_oracle,
test_incremental_pav, test_rank_oracle): solvers that differ only in their private oracle,
run one kernel call per step on the same indices, and every step of every solver checked
against the exact oracle of that step's own loss table.

Why not one solver's states against another's: after a few hundred steps two oracles that
round differently have moved the iterates apart by an amount that depends on the CPU's
rounding path, so a fixed tolerance on that difference is a failure waiting for the next
machine. What an oracle must get right is the weight it hands the step, and that has an
exact reference on the same table. After a step on index ``i`` (see
``riskopt._kernels.prospect._epoch_prospect``):

* ``rho[i]`` is the weight the oracle's data structure gave ``i`` on the table *before* the
  step: it must equal that table's exact weight ``q[i]`` (the previous state's ``q``, an O(n)
  PAV, itself certified) within the oracles' rounding bound :func:`q_tolerance`;
* ``q`` must be the maximiser of ``q.l - nu D(q)`` over the permutahedron ``P(sigma)`` for the
  new table ``l``: it lies in ``P(sigma)`` and its Fenchel-duality gap (``q`` maximises
  ``u.q`` over ``P(sigma)`` for ``u = l - grad(nu D)(q)``, a rearrangement) is zero, both
  within bounds that follow from :func:`q_tolerance` (``tests/test_oracles.py`` checks the
  same certificate on its own cases);
* ``order`` sorts the table and ``rank`` is its inverse (exactly: these are integers).

Every tolerance is a rounding bound in units of the machine epsilon, scaled by the table:
``q_i = (l_i - c) / (2 n nu)`` (chi-square) or ``exp((l_i - c) / nu) / Z`` (KL) with ``c`` of
the size of ``|l|_inf`` and block means over up to ``n`` entries, so a weight is off by at
most a few ``n eps`` times ``|l|_inf / (2 n nu)`` (chi-square) or ``q_max |l|_inf / nu`` (KL),
plus ``n eps max(sigma)`` from the spectrum's sums; for ``nu = 0`` the weights are averages of
``sigma`` (``n eps max(sigma)``).
"""
import numpy as np

import riskopt as ro

EPS = np.finfo(np.float64).eps
#: the constant in front of the rounding bounds (the bounds' own powers of n are in them)
C = 8.0


def prospect_solvers(lr, *oracles, stats=10):
    """One ``Prospect(lr, random_state=0)`` per oracle (``_oracle``), each with an int64
    counter array of length ``stats`` (none with ``stats=0``)."""
    out = []
    for o in oracles:
        s = ro.solvers.Prospect(lr=lr, random_state=0)
        s._oracle = o
        if stats:
            s._stats = np.zeros(stats, dtype=np.int64)
        out.append(s)
    return out


def q_tolerance(obj, losses):
    """A bound on the rounding error of one weight of the table ``losses`` (module doc)."""
    n, nu = len(losses), float(obj.nu)
    big = float(np.max(np.abs(losses)))
    err = float(np.max(obj.sigma))
    if nu > 0:
        err += big / (2 * n * nu) if obj.div == 0 else big / nu * err
    return C * n * EPS * err


def _penalty_grad(obj, q):
    n, nu = len(q), float(obj.nu)
    if nu == 0:
        return np.zeros(n)
    if obj.div == 0:  # chi-square: nu n sum (q - 1/n)^2
        return 2.0 * n * nu * (q - 1.0 / n)
    return nu * (np.log(n * q) + 1.0)  # KL: nu sum q log(n q)


def certify_weights(obj, losses, q, what=""):
    """``q`` is the exact oracle's maximiser for ``losses`` up to rounding: in ``P(sigma)``
    (non-negative, sums to one, majorised by ``sigma``) and with a zero Fenchel gap, each
    within the bound that :func:`q_tolerance` implies."""
    n = len(losses)
    tol = q_tolerance(obj, losses)
    assert np.all(q >= -tol), f"{what}: a negative weight {q.min():.3e} (bound {tol:.1e})"
    assert abs(q.sum() - 1.0) <= n * tol, f"{what}: weights sum to 1 + {q.sum() - 1:.3e}"
    top_q = np.cumsum(np.sort(q)[::-1])
    top_s = np.cumsum(np.sort(obj.sigma)[::-1])
    over = top_q - top_s - tol * np.arange(1, n + 1)
    assert np.all(over <= 0), f"{what}: not majorised by sigma (by {over.max():.3e})"
    if obj.div != 0 and obj.nu > 0 and not np.all(q > 0):
        return  # KL's certificate needs q > 0 (the weights underflowed: membership only)
    g = _penalty_grad(obj, q)
    u = losses - g
    gap = float(np.sort(obj.sigma) @ np.sort(u) - q @ u)
    # q off by tol per entry moves u.q by n tol |u|_inf; the sums round to n eps of their terms
    bound = n * tol * float(np.max(np.abs(u))) + C * n * EPS * float(
        np.max(np.abs(losses)) + np.max(np.abs(g)))
    assert -bound <= gap <= bound, f"{what}: Fenchel gap {gap:.3e} (bound {bound:.1e})"


def certify_step(obj, before, after, i, what=""):
    """The checks of the module doc for one step on index ``i`` from ``before`` to
    ``after``."""
    tol = q_tolerance(obj, before.losses)
    diff = abs(after.rho[i] - before.q[i])
    assert diff <= tol, (f"{what}: the weight used for index {i}, {after.rho[i]!r}, is "
                         f"{diff:.3e} off the table's exact {before.q[i]!r} (bound {tol:.1e})")
    certify_weights(obj, after.losses, after.q, what)
    assert_sorting(after, what)


def assert_sorting(state, what=""):
    """``order`` sorts ``state.losses`` and ``rank`` is its inverse."""
    n = len(state.losses)
    assert np.array_equal(np.sort(state.order), np.arange(n)), f"{what}: order not a permutation"
    assert np.all(np.diff(state.losses[state.order]) >= 0), f"{what}: order does not sort"
    assert np.array_equal(state.rank[state.order], np.arange(n)), f"{what}: rank != order^-1"


def compare_step_by_step(obj, solvers, idx, order=True, rank=True):
    """Run ``solvers`` from their initial states one step (one kernel call) per index of
    ``idx``; every step of every solver is certified against the exact oracle of its own
    table (:func:`certify_step`). Returns the final states. (``order`` / ``rank``: kept for
    the callers; the sorting is always checked.)"""
    states = [s.init_state(obj) for s in solvers]
    for k, st in enumerate(states):
        certify_weights(obj, st.losses, st.q, f"solver {k} at the start")
    for t in range(len(idx)):
        new = [s.update(obj, x, indices=idx[t:t + 1]) for s, x in zip(solvers, states)]
        for k, (a, b) in enumerate(zip(states, new)):
            certify_step(obj, a, b, int(idx[t]), f"solver {k} ({solvers[k]._oracle}) step {t}")
        states = new
    return states


def certify_pass(obj, before, after, idx, checks=200, what=""):
    """A whole pass (one kernel call, one data structure for all its steps) over ``idx``, a
    sequence without repeats, certified step by step from the outside: index ``idx[t]`` is
    visited once, so after the pass ``rho[idx[t]]`` is the weight the oracle gave it at step
    ``t`` and ``losses[idx[t]]`` its new loss, and the table before step ``t`` is ``before``'s
    with the entries of ``idx[:t]`` replaced by ``after``'s. At ``checks`` steps spread over
    the pass (the last one included), the weight used must equal the exact oracle's on that
    table (an O(n) PAV, its own certificate checked by :func:`certify_weights`) within
    :func:`q_tolerance`; the final weights and sorting are certified as in
    :func:`certify_step`."""
    idx = np.asarray(idx)
    T = len(idx)
    assert len(np.unique(idx)) == T, "certify_pass needs a pass without repeated indices"
    steps = set(np.linspace(0, T - 1, min(checks, T)).round().astype(int).tolist())
    table = before.losses.copy()
    for t in range(T):
        i = int(idx[t])
        if t in steps:
            q = obj.risk_weights(table)[1]
            certify_weights(obj, table, q, f"{what}: the exact oracle at step {t}")
            tol = q_tolerance(obj, table)
            diff = abs(after.rho[i] - q[i])
            assert diff <= tol, (f"{what}: step {t} used {after.rho[i]!r} for index {i}, "
                                 f"{diff:.3e} off the exact {q[i]!r} (bound {tol:.1e})")
        table[i] = after.losses[i]
    assert np.array_equal(table, after.losses)
    certify_weights(obj, after.losses, after.q, f"{what}: the end of the pass")
    assert_sorting(after, what)


def run_passes(obj, solvers, passes, seed=0, checks=200):
    """``passes`` whole passes of every solver, each over the same random permutation of the
    rows (drawn from ``seed`` and the pass number), each pass certified by
    :func:`certify_pass`. Returns the final states."""
    n = obj.X.shape[0]
    states = [s.init_state(obj) for s in solvers]
    for e in range(passes):
        idx = np.random.default_rng([seed, e]).permutation(n)
        new = [s.update(obj, x, indices=idx) for s, x in zip(solvers, states)]
        for k, (a, b) in enumerate(zip(states, new)):
            certify_pass(obj, a, b, idx, checks, f"solver {k} ({solvers[k]._oracle}) pass {e}")
        states = new
    return states
