"""The verdict rule of the reproduction report: a comparison with a noise margin.

Every comparison row of ``riskopt bench reproduce`` has, per method, one value per seed (or per
fold) of the paper's metric. :class:`Stat` holds them (mean, standard deviation, count);
:func:`compare` says whether one method is ahead of another *beyond the noise*: the difference
of the means must exceed ``z`` standard errors of the difference (Welch:
``sqrt(s_a^2 / n_a + s_b^2 / n_b)``) and an absolute ``floor`` (a resolution below which two
values are equal, e.g. the accuracy of the reference optimum). Suboptimalities are compared on
a log10 scale (``log=True``), their values below ``tiny`` counted as ``tiny`` (both at the
optimum: a tie); a diverged run (NaN / inf) is worse than any finite one.

:func:`outcome` compares one method (or the best of a group, e.g. SOREL and its mini-batch
version) with every rival on one problem:

* ``"agrees"`` -- ahead of every rival beyond the noise (for a claim that allows ties, such as
  "equal or faster" or "comparable": no rival ahead beyond the noise, ``ties_ok``);
* ``"differs"`` -- a rival ahead beyond the noise;
* ``"within noise"`` -- otherwise;
* ``"too few seeds"`` -- a method has fewer than ``min_seeds`` values: no noise estimate.

:func:`aggregate` turns the outcomes of a row's problems into its verdict against the share of
problems the claim names (1 for "all", 0.9 for "nearly all", 0.5 for "most"): ``"agrees"``
when at least that share agrees, ``"differs"`` when so many differ that the share cannot be
reached even if every within-noise problem agreed, ``"within noise"`` in between, ``"too few
seeds"`` when a problem had no noise estimate.

Examples
--------
>>> a, b = Stat.of([1.0, 1.1, 0.9]), Stat.of([2.0, 2.1, 1.9])
>>> compare(a, b)            # lower is better by default
'better'
>>> compare(Stat.of([1.0, 1.5, 0.5]), Stat.of([1.1, 1.6, 0.6]))
'tie'
>>> outcome({"ours": a, "rival": b}, "ours")
'agrees'
>>> aggregate(["agrees", "agrees", "within noise"], share=1.0)
'within noise'
"""
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Stat", "compare", "outcome", "aggregate", "tally", "VERDICTS", "MIN_SEEDS", "Z"]

VERDICTS = ("agrees", "within noise", "differs", "too few seeds")
#: the fewest values per method for a noise estimate (the issue: at least 3 seeds)
MIN_SEEDS = 3
#: standard errors of the difference that make a difference "beyond the noise"
Z = 2.0


@dataclass(frozen=True)
class Stat:
    """Values of one method on one problem (one per seed / fold): mean, sample std, count."""

    values: tuple

    @classmethod
    def of(cls, values):
        return cls(tuple(float(v) for v in np.asarray(values, dtype=float).ravel()))

    @property
    def n(self):
        return len(self.values)

    @property
    def finite(self):
        return all(math.isfinite(v) for v in self.values)

    @property
    def mean(self):
        return float(np.mean(self.values)) if self.values else float("nan")

    @property
    def std(self):
        return float(np.std(self.values, ddof=1)) if self.n > 1 else float("nan")

    def transformed(self, log=False, tiny=0.0):
        """The values on the comparison scale: ``log10(max(v, tiny))`` with ``log``."""
        v = np.asarray(self.values, dtype=float)
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.log10(np.maximum(v, tiny if tiny > 0 else np.finfo(float).tiny))
        return Stat.of(v)

    def fmt(self, digits=4, log=False):
        """``"mean +- std (n)"`` (``"mean (n=1)"`` without a std)."""
        if log:
            m = self.transformed(log=True)
            return (f"1e{m.mean:.2f}" + (f" +- {m.std:.2f} dec" if self.n > 1 else "")
                    + f" (n={self.n})")
        sd = f" +- {self.std:.{digits}g}" if self.n > 1 else ""
        return f"{self.mean:.{digits}g}{sd} (n={self.n})"


def compare(a, b, higher_better=False, z=Z, floor=0.0, log=False, tiny=0.0):
    """``"better"`` when ``a`` is ahead of ``b`` beyond the noise, ``"worse"`` when ``b`` is,
    ``"tie"`` otherwise. Noise: ``z`` Welch standard errors of the difference of the means
    (on the log10 scale with ``log``) and at least ``floor`` (same scale). A method with a
    non-finite value (diverged) loses to one with all values finite; two such tie."""
    if not (a.finite and b.finite):
        if a.finite != b.finite:
            return "better" if a.finite else "worse"
        return "tie"
    ta, tb = a.transformed(log, tiny), b.transformed(log, tiny)
    var = sum((s.std ** 2 / s.n) if s.n > 1 else 0.0 for s in (ta, tb))
    margin = max(z * math.sqrt(var), floor)
    diff = (ta.mean - tb.mean) * (1 if higher_better else -1)
    if diff > margin:
        return "better"
    if -diff > margin:
        return "worse"
    return "tie"


def outcome(stats, ours, rivals=None, ties_ok=False, min_seeds=MIN_SEEDS, **kw):
    """The outcome of the claim "``ours`` is ahead of ``rivals``" on one problem.

    ``stats``: method -> :class:`Stat`. ``ours``: a method or a tuple of methods (the best of
    them by mean plays); ``rivals``: default every other method. ``ties_ok`` (claims such as
    "equal or faster"): agrees when no rival is ahead beyond the noise. ``kw`` go to
    :func:`compare`. Returns one of :data:`VERDICTS`, or None when ``ours`` or every rival is
    missing."""
    group = (ours,) if isinstance(ours, str) else tuple(ours)
    mine = [m for m in group if m in stats]
    rivals = [m for m in (rivals or stats) if m in stats and m not in group]
    if not mine or not rivals:
        return None
    if any(stats[m].n < min_seeds for m in mine + rivals):
        return "too few seeds"
    sign = -1 if kw.get("higher_better") else 1
    key = lambda m: (not stats[m].finite,  # noqa: E731
                     sign * stats[m].transformed(kw.get("log", False), kw.get("tiny", 0.0))
                     .mean)
    best = min(mine, key=key)
    res = [compare(stats[best], stats[r], **kw) for r in rivals]
    if "worse" in res:
        return "differs"
    if ties_ok or all(r == "better" for r in res):
        return "agrees"
    return "within noise"


def aggregate(outcomes, share=1.0):
    """The verdict of a row from its problems' outcomes (None entries ignored): see the module
    docstring. ``share``: the fraction of the problems the claim needs."""
    out = [o for o in outcomes if o is not None]
    if not out:
        return None
    if "too few seeds" in out:
        return "too few seeds"
    n = len(out)
    agree, differ = out.count("agrees"), out.count("differs")
    need = math.ceil(share * n - 1e-9)
    if agree >= need:
        return "agrees"
    if n - differ < need:
        return "differs"
    return "within noise"


def tally(outcomes):
    """``"3 agree, 1 within noise, 0 differ of 4"``."""
    out = [o for o in outcomes if o is not None]
    return (f"{out.count('agrees')} agree, {out.count('within noise')} within noise, "
            f"{out.count('differs')} differ of {len(out)}"
            + (f" ({out.count('too few seeds')} without a noise estimate)"
               if "too few seeds" in out else ""))
