r"""What the KL-DRO optimizers share (:class:`~riskopt.torch.optim.SCDRO` in
:mod:`~riskopt.torch.optim.kl_dro`, :class:`~riskopt.torch.optim.ASCDRO` in
:mod:`~riskopt.torch.optim.ascdro`, :class:`~riskopt.torch.optim.PGSMD2` in
:mod:`~riskopt.torch.optim.pgsmd2`): the divergence guard's start-rule check
(:class:`_KLWindow`, which values its window of batches by the KL-DRO dual over a grid of
``lambda``, :func:`_kl_dro_value` / :func:`_kl_dro_dual`), the group learning rate, and the
loss dtypes of the CPU path. Not part of the public API (:mod:`~riskopt.torch.optim.kl_dro`
re-exports these names).
"""
import math

import numpy
import torch

from ..._validation import check_positive
from . import _updates

__all__ = []


#: the loss dtypes NumPy reads (a CPU tensor's ``numpy()``)
_NP_LOSSES = (torch.float64, torch.float32, torch.float16)
#: the loss dtypes whose values are float32 numbers
_F32_EXACT = (torch.float32, torch.float16, torch.bfloat16)


def _f64(v):
    """A CPU 0-d float64 tensor holding the float ``v`` (no dispatch)."""
    return torch.from_numpy(numpy.array(v, dtype=numpy.float64))



class _KLWindow:
    """The start rule's estimate for the KL-DRO optimizers: the window keeps the batches'
    losses, valued at the check (:func:`_kl_dro_value`)."""

    def _window_value(self, items):
        return _kl_dro_value(items, self.radius, self.shift_cost).mean()

    def _window_estimate(self, items, limit):
        """The check's estimate (flags on the host): first an upper bound from two of the
        grid's 18 columns (the exponent where the last full evaluation had most of its
        minima, and ``lambda_0``); when that bound is below the limit (with a margin far
        above rounding), so is the estimate, and the bound is returned: the same decision
        at 1/9 of the exponentials (about half the check's valuation time at 10 x 256
        losses: it is dispatch-bound). Otherwise the whole grid, whose minimisers choose
        the next exponent (kept in the checkpoint with the flags)."""
        g = self._g
        if self.radius is not None and math.isfinite(limit) and math.isfinite(g["lam"]):
            bound = float(_kl_dro_dual(items, self.radius, self.shift_cost,
                                       (int(g["lam"]),)).amin(1).mean())
            if bound < limit - 1e-9 * (abs(limit) + abs(bound) + g["scale"]):
                return bound
        dual = _kl_dro_dual(items, self.radius, self.shift_cost)
        if self.radius is not None:
            cols = dual.argmin(1).tolist()
            c = max(sorted(set(cols)), key=cols.count)     # (lambda_0's column: any)
            g["lam"] = float(_GRID_EXP[min(c, len(_GRID_EXP) - 1)])
        return float(dual.amin(1).mean())

    def _group_lr(self):
        """The learning rate of the parameter groups, read at every step (so that a
        ``torch.optim.lr_scheduler`` scheduler acts; the RSCDRO / ASCDRO schedules multiply
        it). The update takes one rate for all parameters and ``lambda``: groups with
        different rates are refused, not silently given the constructor's."""
        lrs = {g["lr"] for g in self.param_groups if not g.get("previous_iterate")}
        if len(lrs) != 1:
            raise ValueError(f"{type(self).__name__} uses one learning rate for all its "
                             f"parameters and lambda; the parameter groups have "
                             f"{sorted(lrs)}")
        (lr,) = lrs
        lr = float(lr)
        if not (math.isfinite(lr) and lr >= 0.0):
            raise ValueError(f"{type(self).__name__}: the parameter groups' lr must be finite "
                             f"and >= 0, got {lr}")
        return lr


def _check_rates(lr, beta, mu):
    """SCDRO's and ASCDRO's checks of the step size, the moving-average rate ``beta`` in
    ``(0, 1]`` and ``mu >= 0``."""
    check_positive("lr", lr)
    if check_positive("beta", beta) > 1:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    check_positive("mu", mu, allow_zero=True)


class _KLMultiplier:
    """SCDRO's and ASCDRO's multiplier ``lambda`` (a 0-d float64 tensor, ``_scalars["lam"]``,
    on the parameters' device) and their choice of path."""

    @property
    def lam(self):
        """The current multiplier (a float)."""
        return float(self._scalars["lam"])

    def _host(self):
        """Whether this step's batch statistics and scalars run in NumPy / Python floats:
        eager (not :meth:`compile`) on the CPU (chosen by device, not by data)."""
        return self._compile_kwargs is None and _updates._host(self._scalars["lam"])

    def _checkpoint(self, **extra):
        """This optimizer's entry of ``state_dict`` (under ``_KEY``): the scalars, ``extra``,
        the step counter, the started flag and the divergence guard."""
        return {"scalars": {k: v.detach().clone() for k, v in self._scalars.items()}, **extra,
                "t": self._t, "started": self._started, "guard": self._guard_state()}

    def _pop_checkpoint(self, state_dict):
        """``(state_dict without its entry, the entry)``; a ValueError when it has none."""
        state_dict = dict(state_dict)
        extra = state_dict.pop(self._KEY, None)
        if extra is None:
            raise ValueError(f"state_dict has no {self._KEY!r} entry: not from an "
                             f"{self._KEY.upper()} optimizer")
        return state_dict, extra


#: the grid of lambda / spread of :func:`_kl_dro_value`: 4^-10 ... 4^6
_GRID_EXP = tuple(range(-20, 13, 2))
#: the grids ``2 ** exps`` by (device, exps)
_GRID = {}


def _kl_dro_value(batches, radius, shift_cost=0.0):
    r"""Each batch's KL-DRO value :math:`\max\{\sum_i p_i\ell_i - \lambda_0 KL(p\|u) :
    KL(p\|u) \le \rho\}` (``u`` uniform over the batch) through its dual
    :math:`\min_{\lambda\ge\lambda_0} \lambda\log\frac1b\sum_i e^{\ell_i/\lambda}
    + (\lambda-\lambda_0)\rho`, minimised over a geometric grid of ``lambda`` (factor 4
    apart, ``2^-20`` to ``2^12`` times the spread of the batch's losses, and ``lambda_0``):
    an upper bound, within 25 % of the excess over the mean loss for Gaussian losses.
    ``radius=None``: the KL-penalised value :math:`\lambda_0\log\frac1b\sum_i
    e^{\ell_i/\lambda_0}` (RECOVER). One tensor program over all the batches (a list of 1-D
    tensors, padded), no host sync; float64.

    >>> import torch
    >>> l = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    >>> v = _kl_dro_value([l, l[:2]], 0.1)
    >>> bool(1.5 < v[0] < 3.0 and 0.5 < v[1] < 1.0)
    True
    """
    return _kl_dro_dual(batches, radius, shift_cost).amin(1)


def _kl_dro_dual(batches, radius, shift_cost=0.0, exps=_GRID_EXP):
    """:func:`_kl_dro_value`'s dual objective at each ``lambda`` of its grid: a (batches,
    ``len(exps) + 1``) array, the columns ``lambda = 2^e`` times the spread (``e`` in
    ``exps``) and ``lambda_0`` (each at least ``lambda_0``). Any subset of the grid's
    exponents gives some of the grid's columns: their minimum bounds the value from above."""
    rows = [t.reshape(-1).to(torch.float64) for t in batches]
    dev = rows[0].device
    sizes = [t.numel() for t in rows]
    padded = len(set(sizes)) > 1        # (equal batches: one stack, no padding to mask)
    L = (torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=-math.inf)
         if padded else torch.stack(rows))
    lam0 = max(float(shift_cost), 1e-300)
    hi = L.amax(1)
    if radius is None:
        lam = torch.full((len(rows), 1), lam0, dtype=torch.float64, device=dev)
        radius = 0.0
    else:
        lo = (torch.where(torch.isinf(L), math.inf, L) if padded else L).amin(1)
        spread = torch.maximum(hi - lo, 1e-12 * torch.maximum(hi.abs(), lo.abs()))
        grid = _GRID.get((dev, exps))
        if grid is None:
            grid = _GRID[dev, exps] = torch.exp2(torch.tensor(exps, dtype=torch.float64,
                                                              device=dev))
        lam = torch.cat([spread.clamp(min=1e-300)[:, None] * grid,
                         torch.full((len(rows), 1), lam0, dtype=torch.float64, device=dev)],
                        1).clamp(min=lam0)
    # the log-sum-exp with its shift known (the batch's largest loss over lambda > 0): two
    # passes fewer over the (batches, grid, rows) array than torch.logsumexp
    e = ((L - hi[:, None])[:, None, :] / lam[:, :, None]).exp_().sum(2)
    lse = e.log_() + hi[:, None] / lam - torch.log(
        torch.tensor(sizes, dtype=torch.float64, device=dev))[:, None]
    return lam * (lse + radius) - float(shift_cost) * radius
