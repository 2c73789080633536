r"""Pairwise X-risks: one-way and two-way partial AUC losses (LibAUC's objectives, exact).

Scores :math:`h_i = h_w(x_i)` and labels :math:`y_i \in \{0, 1\}` of a batch; positives
:math:`S_+`, negatives :math:`S_-`; a surrogate :math:`L(w; x_i, x_j) = \ell(h_i - h_j)` of
the pairwise error (squared hinge :math:`\max(m - t, 0)^2` by default, as LibAUC).

* **One-way partial AUC** (FPR in :math:`[0, \beta]`; Zhu et al., ICML 2022, "When AUC meets
  DRO", Eqs. (3)-(4)), :class:`PAUCLoss`:

  .. math::

      F(w) = \frac1{n_+}\sum_{i \in S_+} \mathrm{CVaR}_\beta\big(\{L(w; x_i, x_j)\}_{j \in
      S_-}\big) \quad\text{or}\quad
      \frac1{n_+}\sum_{i \in S_+} \lambda \log\frac1{n_-}\sum_{j\in S_-}
      e^{L(w; x_i, x_j)/\lambda}

  (``risk="cvar"``: the average of the top :math:`\beta` fraction of each positive's pairwise
  losses, the exact mini-batch CVaR by selection, a fractional boundary pair; ``risk="kl"``:
  KL-DRO with :math:`\lambda` = ``shift_cost``, LibAUC's ``pAUC_DRO_Loss``).
* **Two-way partial AUC** (TPR :math:`\ge 1 - \alpha`, FPR :math:`\le \beta`; Zhu et al.,
  Eq. (6)), :class:`TwoWayPAUCLoss`: the CVaR over the positives of the per-positive CVaR
  over the negatives,

  .. math::

      F(w) = \mathrm{CVaR}_\alpha\Big(\big\{\mathrm{CVaR}_\beta(\{L(w; x_i, x_j)\}_{j\in S_-})
      \big\}_{i \in S_+}\Big)

  or the nested KL form :math:`\lambda' \log \frac1{n_+}\sum_i (\frac1{n_-}\sum_j
  e^{L_{ij}/\lambda})^{\lambda/\lambda'}` (LibAUC's ``tpAUC_KL_Loss``).

* **AUC with ROC-fairness constraints** (SONEX/ALEXR2 paper, Sec. 6, Eq. (53)),
  :class:`ROCFairnessAUCLoss`: the pairwise sigmoid AUC loss plus penalties of the 14 TPR /
  FPR gaps between two groups (its docstring).

The gradient of the partial-AUC losses is the Danskin gradient of the exact batch risk (LibAUC's losses instead track
moving-average estimators per positive, SOPA / SOPA-s, to reduce the mini-batch bias; these
are the plug-in batch estimates, like :class:`SpectralRiskLoss`).

Devices: on CPU tensors in eager mode the pairs are the ``(n+, n-)`` matrix of the batch's
positives and negatives (boolean indexing: reading the counts costs no device sync). On any
other device and under ``torch.compile`` the pairs are the ``(b, b)`` matrix with masks (no
data-dependent shape, no host synchronisation): CVaR over the negatives of each row by
:func:`riskopt.torch._oracles.cvar_present`, KL by :func:`riskopt.torch._oracles.kl_penalised`
with the mask (the same branches for a ``lambda`` far above the range as the host path). The
numbers are the same.
"""

import torch
from torch import nn

from ... import risks as _risks
from ..._validation import check_positive
from .. import _oracles as _to
from ._common import _attach_dot, _check_choice, _host_eager

__all__ = ["PAUCLoss", "TwoWayPAUCLoss", "ROCFairnessAUCLoss", "pairwise_surrogate"]

_SURROGATES = ("squared_hinge", "hinge", "logistic", "sigmoid")


def pairwise_surrogate(t, kind="squared_hinge", margin=1.0):
    r""":math:`\ell(t)` of the score difference :math:`t = h_+ - h_-` (decreasing in ``t``)."""
    if kind == "squared_hinge":
        return torch.clamp(margin - t, min=0.0) ** 2
    if kind == "hinge":
        return torch.clamp(margin - t, min=0.0)
    if kind == "logistic":
        return torch.nn.functional.softplus(margin - t)
    if kind == "sigmoid":
        return torch.sigmoid(margin - t)
    raise ValueError(f"surrogate must be one of {_SURROGATES}, got {kind!r}")


def _check_scores(scores, labels):
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise ValueError("scores must be a floating-point torch.Tensor")
    if scores.ndim == 2 and scores.shape[1] == 1:
        scores = scores[:, 0]
    if scores.ndim != 1:
        raise ValueError(f"scores must have shape (b,) or (b, 1), got {tuple(scores.shape)}")
    labels = torch.as_tensor(labels, device=scores.device)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.shape != scores.shape:
        raise ValueError(f"labels must have shape {tuple(scores.shape)}, got "
                         f"{tuple(labels.shape)}")
    return scores, labels.detach()


def _row_cvar(L, beta, mask=None):
    """``(values, q)`` of ``CVaR_beta`` of each row of ``L`` (float64, no autograd), over the
    entries flagged by ``mask`` when given."""
    if mask is None:
        return _to.spectral_risk(L, _cvar(beta))
    q = _to.cvar_present(L, mask, beta)
    return (q * torch.where(mask, L, 0.0)).sum(-1), q


_CVAR_CACHE = {}


def _cvar(beta):
    r = _CVAR_CACHE.get(beta)
    if r is None:
        r = _CVAR_CACHE[beta] = _risks.CVaR(beta)
    return r


class _PairwiseBase(nn.Module):
    def __init__(self, risk, tail_fraction, shift_cost, surrogate, margin):
        super().__init__()
        self.risk = _check_choice("risk", risk, ("cvar", "kl"))
        b = check_positive("tail_fraction", tail_fraction)
        if b > 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {b}")
        self.tail_fraction = b
        self.shift_cost = check_positive("shift_cost", shift_cost)
        self.surrogate = _check_choice("surrogate", surrogate, _SURROGATES)
        self.margin = float(margin)

    def _pairs(self, scores, labels):
        """``(L, rows, mask)``: pairwise losses; host eager: ``(n+, n-)`` and no mask;
        otherwise ``(b, b)`` with the positive-row and negative-column masks."""
        pos = labels == 1
        if _host_eager(scores):
            neg = labels == 0
            n_pos, n_neg = int(pos.sum()), int(neg.sum())
            if n_pos == 0 or n_neg == 0:
                raise ValueError(f"the batch needs positives and negatives, got {n_pos} "
                                 f"positive(s) and {n_neg} negative(s)")
            if n_pos + n_neg != labels.shape[0]:
                raise ValueError("labels must be 0 or 1")
            t = scores[pos].unsqueeze(1) - scores[neg].unsqueeze(0)
            return pairwise_surrogate(t, self.surrogate, self.margin), None, None
        t = scores.unsqueeze(1) - scores.unsqueeze(0)
        L = pairwise_surrogate(t, self.surrogate, self.margin)
        return L, pos, (labels == 0).unsqueeze(0).expand(L.shape)

    def _inner(self, L64, mask):
        if self.risk == "cvar":
            return _row_cvar(L64, self.tail_fraction, mask)
        return _to.kl_penalised(L64, self.shift_cost, mask)


class PAUCLoss(_PairwiseBase):
    r"""One-way partial AUC loss (FPR :math:`\le \beta`): the mean over the positives of a
    risk of each positive's pairwise losses against the negatives (module docstring).

    Parameters
    ----------
    risk : {"cvar", "kl"}, default "cvar"
        ``"cvar"``: :math:`\mathrm{CVaR}_\beta` over the negatives (LibAUC ``pAUC_CVaR_Loss``'s
        objective); ``"kl"``: :math:`\lambda \log \frac1{n_-}\sum_j e^{L_{ij}/\lambda}`
        (``pAUC_DRO_Loss``).
    tail_fraction : float in (0, 1], default 0.1
        :math:`\beta`.
    shift_cost : float > 0, default 1.0
        :math:`\lambda` of the KL form.
    surrogate : {"squared_hinge", "hinge", "logistic", "sigmoid"}, default "squared_hinge"
    margin : float, default 1.0

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch.losses import PAUCLoss
    >>> scores = torch.tensor([2.0, 0.5, 0.0, 1.0, -1.0], requires_grad=True)
    >>> labels = torch.tensor([1, 1, 0, 0, 0])
    >>> loss = PAUCLoss("cvar", tail_fraction=1 / 3)(scores, labels)  # the hardest negative
    >>> round(loss.item(), 6)  # mean of max(1 - (2 - 1), 0)^2 = 0 and (1 - (0.5 - 1))^2
    1.125
    """

    def __init__(self, risk="cvar", tail_fraction=0.1, shift_cost=1.0,
                 surrogate="squared_hinge", margin=1.0):
        super().__init__(risk, tail_fraction, shift_cost, surrogate, margin)

    def forward(self, scores, labels):
        scores, labels = _check_scores(scores, labels)
        L, rows, mask = self._pairs(scores, labels)
        v, q = self._inner(L.detach().to(torch.float64), mask)
        r = _attach_dot(L, q, v)
        if rows is None:
            return r.mean()
        w = rows.to(r.dtype)
        return (r * w).sum() / w.sum()


class TwoWayPAUCLoss(_PairwiseBase):
    r"""Two-way partial AUC loss (TPR :math:`\ge 1 - \alpha`, FPR :math:`\le \beta`): an
    outer risk over the positives of the inner risk over the negatives (module docstring).

    ``risk="cvar"``: :math:`\mathrm{CVaR}_\alpha` of the per-positive
    :math:`\mathrm{CVaR}_\beta`; ``risk="kl"``: :math:`\lambda' \log \frac1{n_+}\sum_i \exp(
    R_i / \lambda')` of the per-positive :math:`R_i = \lambda \log\frac1{n_-}\sum_j
    e^{L_{ij}/\lambda}` (LibAUC ``tpAUC_KL_Loss``'s objective). The gradient with respect to
    :math:`L_{ij}` is :math:`p_i q_{ij}` (both exact maximisers).

    Parameters
    ----------
    risk : {"cvar", "kl"}, default "cvar"
    pos_fraction : float in (0, 1], default 0.5
        :math:`\alpha` (CVaR over the positives).
    tail_fraction : float in (0, 1], default 0.1
        :math:`\beta` (CVaR over the negatives).
    shift_cost, pos_shift_cost : float > 0, default 1.0
        :math:`\lambda` (inner) and :math:`\lambda'` (outer) of the KL form.
    surrogate, margin : see :class:`PAUCLoss`.
    """

    def __init__(self, risk="cvar", pos_fraction=0.5, tail_fraction=0.1, shift_cost=1.0,
                 pos_shift_cost=1.0, surrogate="squared_hinge", margin=1.0):
        super().__init__(risk, tail_fraction, shift_cost, surrogate, margin)
        a = check_positive("pos_fraction", pos_fraction)
        if a > 1:
            raise ValueError(f"pos_fraction must be in (0, 1], got {a}")
        self.pos_fraction = a
        self.pos_shift_cost = check_positive("pos_shift_cost", pos_shift_cost)

    def forward(self, scores, labels):
        scores, labels = _check_scores(scores, labels)
        L, rows, mask = self._pairs(scores, labels)
        v, q = self._inner(L.detach().to(torch.float64), mask)
        if self.risk == "cvar":
            if rows is None:
                val, p = _to.spectral_risk(v, _cvar(self.pos_fraction))
            else:
                p = _to.cvar_present(v, rows, self.pos_fraction)
                val = (p * torch.where(rows, v, 0.0)).sum()
        else:
            val, p = _to.kl_penalised(v.unsqueeze(0), self.pos_shift_cost,
                                      None if rows is None else rows.unsqueeze(0))
            val, p = val[0], p[0]
        if rows is not None:
            p = torch.where(rows, p, 0.0)
        return _attach_dot(L.flatten(), (p.unsqueeze(-1) * q).flatten(), val)


def _masked_mean(x, mask):
    """Mean of ``x`` over the rows flagged by ``mask`` (leading dim), no boolean indexing."""
    w = mask.to(x.dtype)
    return (w.reshape(w.shape + (1,) * (x.ndim - 1)) * x).sum(0) / w.sum()


class ROCFairnessAUCLoss(nn.Module):
    r"""AUC maximisation with ROC-fairness constraints (SONEX/ALEXR2 paper, Sec. 6, Eq. (53)).

    For scores :math:`s_i`, labels :math:`y_i \in \{0,1\}` and a protected attribute
    :math:`a_i \in \{0, 1\}` (group P: ``a = 1``, U: ``a = 0``):

    .. math::

        F(w) = -\frac1{n_+ n_-}\sum_{i\in D_+, j\in D_-}\sigma(s_i - s_j)
        + \frac{\rho}{m}\sum_{c=1}^{m} f\big(|g_c(w)| - \kappa\big),

    with the :math:`m = 2 |T|` inner functions, for each threshold :math:`\tau \in T`
    (default :math:`\{-3, \dots, 3\}`): the TPR gap
    :math:`g^+_\tau = \mathrm{mean}_{P\cap D_+}\sigma(s - \tau) -
    \mathrm{mean}_{U\cap D_+}\sigma(s - \tau)` and the FPR gap :math:`g^-_\tau` (the same over
    :math:`D_-`); ``penalty`` :math:`f(h) = \max(h, 0)` (``"hinge"``) or
    :math:`\max(h, 0)^2` (``"squared_hinge"``). ``forward`` is the plug-in batch value (the
    inner means of a mini-batch are biased inside :math:`f`); for the compositional
    optimizers :class:`riskopt.torch.optim.SONEX` / ``ALEXR2`` / ``SONX`` / ``SOX``,
    :meth:`terms` returns the direct term and the ``m`` inner values to pass as
    ``opt.surrogate(idx, g_now, g_prev, direct=F)`` (see ``benchmarks/fcco_auc_fairness.py``).
    Masks, no boolean indexing: no host synchronisation (an empty cell gives NaN).
    """

    def __init__(self, thresholds=(-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0), kappa=0.005,
                 rho=1.0, penalty="hinge"):
        super().__init__()
        self.thresholds = tuple(float(t) for t in thresholds)
        if not self.thresholds:
            raise ValueError("thresholds must not be empty")
        self.kappa = check_positive("kappa", kappa, allow_zero=True)
        self.rho = check_positive("rho", rho, allow_zero=True)
        self.penalty = _check_choice("penalty", penalty, ("hinge", "squared_hinge"))

    def terms(self, scores, labels, protected):
        """``(direct, g)``: the AUC term and the ``2 |T|`` gaps ``[g+_tau..., g-_tau...]``."""
        scores, labels = _check_scores(scores, labels)
        prot = torch.as_tensor(protected, device=scores.device).reshape(-1).detach()
        if prot.shape != scores.shape:
            raise ValueError(f"protected must have shape {tuple(scores.shape)}")
        pos, neg = labels == 1, labels == 0
        prot = prot.to(torch.bool)
        pair = (pos.unsqueeze(1) & neg.unsqueeze(0)).to(scores.dtype)
        direct = -(torch.sigmoid(scores.unsqueeze(1) - scores.unsqueeze(0)) * pair).sum() \
            / pair.sum()
        taus = torch.tensor(self.thresholds, dtype=scores.dtype, device=scores.device)
        sg = torch.sigmoid(scores.unsqueeze(1) - taus)  # (b, |T|)
        g = torch.cat([_masked_mean(sg, pos & prot) - _masked_mean(sg, pos & ~prot),
                       _masked_mean(sg, neg & prot) - _masked_mean(sg, neg & ~prot)])
        return direct, g

    def forward(self, scores, labels, protected):
        direct, g = self.terms(scores, labels, protected)
        h = torch.clamp(g.abs() - self.kappa, min=0.0)
        if self.penalty == "squared_hinge":
            h = h * h
        return direct + self.rho * h.mean()
