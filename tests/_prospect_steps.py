"""Prospect step by step for the oracle tests (test_box_oracle, test_hull_oracle,
test_incremental_pav, test_rank_oracle): solvers that differ only in their private oracle,
run one kernel call per step on the same indices, every iterate compared."""
import numpy as np

import riskopt as ro

#: the state fields compared after every step
FIELDS = ("coef", "losses", "derivs", "q", "rho", "gbar")


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


def assert_same_state(a, b, t, order=False, rank=False):
    """``a`` equals ``b`` on every field of ``FIELDS`` to 1e-12 of ``b``'s scale (at least 1),
    and on ``order`` / ``rank`` exactly where asked."""
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-12 * max(1.0, np.abs(y).max()),
                                   err_msg=f"{f} at step {t}")
    if order:
        np.testing.assert_array_equal(a.order, b.order, err_msg=f"order at step {t}")
    if rank:
        np.testing.assert_array_equal(a.rank, b.rank, err_msg=f"rank at step {t}")


def compare_step_by_step(obj, solvers, idx, order=False, rank=False):
    """Run ``solvers`` from their initial states one step (one kernel call) per index of
    ``idx``; after every step the first state must equal every other
    (:func:`assert_same_state`). Returns the final states."""
    states = [s.init_state(obj) for s in solvers]
    for t in range(len(idx)):
        states = [s.update(obj, x, indices=idx[t:t + 1]) for s, x in zip(solvers, states)]
        for other in states[1:]:
            assert_same_state(states[0], other, t, order, rank)
    return states
