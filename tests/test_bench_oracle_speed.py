"""``benchmarks/oracle_speed.py``'s timing schedule: the calls of a row run in a random order
each round (stop 43), so no column is systematically the one after ``np.sort``."""
import math

import numpy as np
from conftest import load_benchmark


def _module():
    return load_benchmark("oracle_speed")


def test_round_orders_spread_every_call_over_every_place():
    mod = _module()
    m, rounds = 3, 600
    orders = mod.round_orders(m, rounds)
    assert len(orders) == rounds and all(sorted(o) == list(range(m)) for o in orders)
    assert [list(o) for o in orders] == [list(o) for o in mod.round_orders(m, rounds)]
    place = np.zeros((m, m), dtype=int)   # place[call, position]
    after = np.zeros((m, m), dtype=int)   # after[call, the call before it in its round]
    for o in orders:
        for p, j in enumerate(o):
            place[j, p] += 1
            if p:
                after[j, o[p - 1]] += 1
    # each call in each place about rounds / m times (a fixed order: rounds or 0)
    assert place.min() >= rounds / m * 0.75 and place.max() <= rounds / m * 1.25
    # and after each other call, not always after the same one
    off = after[~np.eye(m, dtype=bool)]
    assert off.min() >= 0.5 * off.mean()


def test_interleaved_medians_times_every_call_each_round():
    mod = _module()
    calls = [0, 0]

    def f0():
        calls[0] += 1

    def f1():
        calls[1] += 1

    med = mod.interleaved_medians([f0, None, f1], 9)
    assert calls == [10, 10]   # one warm-up call, then one per round
    assert math.isnan(med[1]) and all(t >= 0.0 for t in (med[0], med[2]))
