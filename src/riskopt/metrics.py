r"""Per-group evaluation and fairness metrics.

* the error of every group, the worst and the median group (:func:`group_errors`,
  :func:`worst_group_error`, :func:`median_group_error`: group DRO, distribution shift);
* fairness gaps between the groups of a sensitive attribute ``A``:
  :func:`equal_opportunity_difference` and :func:`absolute_mean_difference` (SOREL paper,
  Sec. 5.2 / App. B.2), :func:`demographic_parity_difference` (classification, Agarwal et al.
  2018) and :func:`statistical_parity_ks` (regression: the Kolmogorov-Smirnov distance the
  Prospect paper uses, Sec. 4.2 / App. H).

Differences and ratios between groups follow fairlearn's conventions (``fairlearn.metrics``,
tested against it on random cases): a *difference* is non-negative, ``max_g r_g - min_g r_g``
(``method="between_groups"``, the default) or ``max_g |r_g - r|`` with ``r`` the overall rate
(``method="to_overall"``); a *ratio* is in ``[0, 1]``, ``min_g r_g / max_g r_g`` or
``min_g min(r_g / r, r / r_g)``. Equalized odds takes the worse (``agg="worst_case"``) or the
mean (``agg="mean"``) of the true- and false-positive-rate differences (ratios). The one signed
quantity is SOREL's :func:`equal_opportunity_difference` for two groups (``signed=True``, the
default in the positional form); ``signed=False`` is fairlearn's absolute value.

**fairlearn's keyword.** Every fairness gap takes the sensitive attribute positionally (last
array argument) or as fairlearn's keyword ``sensitive_features=`` (one of the two; neither or
both is a TypeError), so that fairlearn code runs unchanged: ``equalized_odds_difference(y_true,
y_pred, sensitive_features=a)``; ``demographic_parity_difference(y_true, y_pred,
sensitive_features=a)`` -- fairlearn's form, whose ``y_true`` is not used (its length is
checked) -- or ``demographic_parity_difference(y_pred, sensitive_features=a)``; and
``equal_opportunity_difference(y_true, y_pred, sensitive_features=a)`` is then fairlearn's
absolute gap (``signed=False`` unless given). Tested against fairlearn on random cases.

Conventions follow :mod:`sklearn.metrics`: ``y_true``, ``y_pred`` and ``groups`` are
array-likes of the same length (NumPy arrays, lists, pandas Series); ``sample_weight``
weights the samples inside each group. A group is a distinct value of ``groups`` (any hashable,
sortable labels); groups are reported in sorted order.

The error of a group ``g`` with samples ``I_g`` is the (weighted) mean of a per-sample loss,

.. math::

    e_g = \frac{\sum_{i \in I_g} s_i\, \ell(y_i, \hat y_i)}{\sum_{i \in I_g} s_i},

with the 0-1 loss ``1[y_i != yhat_i]`` by default (classification error), or any ``loss``:
a callable ``loss(y_true, y_pred) -> per-sample losses``, or precomputed per-sample losses
(pass ``y_true=None, y_pred=losses, loss="precomputed"``). :func:`worst_group_error` is
``max_g e_g``; :func:`median_group_error` the median over groups (each group counting once).

:func:`group_errors` returns a :class:`GroupTable` with one record per group (``group``,
``size``, ``weight``, ``error``), without pandas; ``table.to_frame()`` converts it when pandas is
installed. New per-group metrics (fairness gaps, ...) are functions of this table.

Examples
--------
>>> from riskopt.metrics import group_errors, worst_group_error
>>> y_true = [0, 1, 1, 0, 1, 0]
>>> y_pred = [0, 1, 0, 0, 0, 1]
>>> groups = ["a", "a", "b", "b", "b", "b"]
>>> table = group_errors(y_true, y_pred, groups)
>>> table.errors
{'a': 0.0, 'b': 0.75}
>>> worst_group_error(y_true, y_pred, groups)
0.75
>>> table.worst
('b', 0.75)
"""
from dataclasses import dataclass

import numpy as np

__all__ = ["group_errors", "worst_group_error", "median_group_error", "GroupTable",
           "equal_opportunity_difference", "absolute_mean_difference",
           "demographic_parity_difference", "demographic_parity_ratio",
           "equalized_odds_difference", "equalized_odds_ratio", "statistical_parity_ks"]


@dataclass(frozen=True)
class GroupTable:
    """Per-group sizes and errors (sorted by group label).

    Attributes
    ----------
    groups : ndarray
        The distinct group labels, sorted.
    sizes : ndarray of int
        Number of samples per group.
    weights : ndarray of float
        Total sample weight per group (``sizes`` without weights).
    values : ndarray of float
        The (weighted) mean loss per group, ``e_g``.
    """

    groups: np.ndarray
    sizes: np.ndarray
    weights: np.ndarray
    values: np.ndarray

    @property
    def errors(self):
        """``{group: error}`` (plain Python keys and floats, in sorted group order)."""
        return {_plain(g): float(e) for g, e in zip(self.groups, self.values)}

    @property
    def records(self):
        """One dict per group: ``group``, ``size``, ``weight``, ``error``."""
        return [{"group": _plain(g), "size": int(n), "weight": float(w), "error": float(e)}
                for g, n, w, e in zip(self.groups, self.sizes, self.weights, self.values)]

    @property
    def worst(self):
        """``(group, error)`` of the group with the largest error (the first in sorted order
        on ties)."""
        k = int(np.nanargmax(self.values))
        return _plain(self.groups[k]), float(self.values[k])

    def __len__(self):
        return len(self.groups)

    def to_frame(self):
        """A :class:`pandas.DataFrame` with columns ``group, size, weight, error``."""
        import pandas as pd

        return pd.DataFrame.from_records(self.records)


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _column(name, values):
    """A 1-d NumPy array of an array-like (list, array, pandas Series / one-column frame)."""
    arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _check_inputs(y_true, y_pred, groups, sample_weight):
    y_pred = _column("y_pred", y_pred)
    groups = _column("groups", groups)
    arrays = {"y_pred": y_pred, "groups": groups}
    if y_true is not None:
        y_true = _column("y_true", y_true)
        arrays = {"y_true": y_true, **arrays}
    if sample_weight is not None:
        sample_weight = _column("sample_weight", sample_weight).astype(np.float64)
        arrays["sample_weight"] = sample_weight
    lengths = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError("inconsistent numbers of samples: "
                         + ", ".join(f"{k} has {n}" for k, n in lengths.items()))
    n = y_pred.shape[0]
    if n == 0:
        raise ValueError("empty input: group metrics need at least 2 samples")
    if n == 1:
        raise ValueError("a single sample: group metrics need at least 2 samples")
    if sample_weight is not None and (not np.all(np.isfinite(sample_weight))
                                      or np.any(sample_weight < 0)):
        raise ValueError("sample_weight must be finite and non-negative")
    return y_true, y_pred, groups, sample_weight


def _per_sample_losses(y_true, y_pred, loss):
    if isinstance(loss, str) and loss == "precomputed":
        losses = np.asarray(y_pred, dtype=np.float64)
    elif loss is None:
        if y_true is None:
            raise ValueError("y_true is needed unless loss='precomputed'")
        losses = (y_true != y_pred).astype(np.float64)
    elif callable(loss):
        if y_true is None:
            raise ValueError("y_true is needed unless loss='precomputed'")
        losses = np.asarray(loss(y_true, y_pred), dtype=np.float64)
        if losses.shape != y_pred.shape:
            raise ValueError(f"loss must return one value per sample, shape {y_pred.shape}, "
                             f"got {losses.shape}")
    else:
        raise ValueError(f"loss must be None (0-1 loss), a callable or 'precomputed', "
                         f"got {loss!r}")
    return losses


def group_errors(y_true, y_pred, groups, loss=None, sample_weight=None):
    """Size, total weight and (weighted) mean loss of every group.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or None
        True targets (None with ``loss="precomputed"``).
    y_pred : array-like of shape (n_samples,)
        Predictions, or the per-sample losses with ``loss="precomputed"``.
    groups : array-like of shape (n_samples,)
        Group label of every sample.
    loss : None, callable or "precomputed", default=None
        None: the 0-1 loss ``y_true != y_pred`` (classification error); a callable
        ``loss(y_true, y_pred)`` returning per-sample losses (e.g.
        ``lambda y, z: (y - z) ** 2``); ``"precomputed"``: ``y_pred`` holds the losses.
    sample_weight : array-like of shape (n_samples,), optional
        Weights inside each group (a group whose weights sum to 0 has error NaN).

    Returns
    -------
    GroupTable
        ``.groups, .sizes, .weights, .values``; ``.errors`` (dict), ``.records``,
        ``.worst``, ``.to_frame()``.
    """
    y_true, y_pred, groups, sample_weight = _check_inputs(y_true, y_pred, groups,
                                                          sample_weight)
    losses = _per_sample_losses(y_true, y_pred, loss)
    labels, inverse = np.unique(groups, return_inverse=True)
    inverse = inverse.reshape(-1)
    sizes = np.bincount(inverse, minlength=labels.shape[0])
    w = np.ones(losses.shape[0]) if sample_weight is None else sample_weight
    weights = np.bincount(inverse, weights=w, minlength=labels.shape[0])
    totals = np.bincount(inverse, weights=w * losses, minlength=labels.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        values = totals / weights
    values[weights == 0] = np.nan
    return GroupTable(groups=labels, sizes=sizes, weights=weights.astype(np.float64),
                      values=values)


def worst_group_error(y_true, y_pred, groups, loss=None, sample_weight=None):
    """The largest per-group error ``max_g e_g`` (:func:`group_errors`)."""
    return float(np.nanmax(group_errors(y_true, y_pred, groups, loss, sample_weight).values))


def median_group_error(y_true, y_pred, groups, loss=None, sample_weight=None):
    """The median of the per-group errors, each group counting once (:func:`group_errors`)."""
    return float(np.nanmedian(group_errors(y_true, y_pred, groups, loss,
                                           sample_weight).values))


# ---------------------------------------------------------------------------- fairness
def _sensitive_groups(y_pred, sensitive, sample_weight, y_true=None):
    """Validated arrays, the sorted sensitive values and each sample's group index."""
    y_true, y_pred, sensitive, sample_weight = _check_inputs(y_true, y_pred, sensitive,
                                                             sample_weight)
    labels, inverse = np.unique(sensitive, return_inverse=True)
    if labels.shape[0] < 2:
        raise ValueError(f"the sensitive attribute has a single value ({_plain(labels[0])!r}): "
                         "a fairness gap needs at least two groups")
    w = np.ones(y_pred.shape[0]) if sample_weight is None else sample_weight
    return y_true, y_pred, labels, inverse.reshape(-1), w


def _sensitive(sensitive, sensitive_features):
    """The sensitive attribute, given positionally or by fairlearn's keyword (module docstring,
    "fairlearn's keyword"); exactly one of the two."""
    if sensitive_features is None:
        if sensitive is None:
            raise TypeError("the sensitive attribute is missing: pass it as the last positional "
                            "argument or as sensitive_features=")
        return sensitive
    if sensitive is not None:
        raise TypeError("the sensitive attribute is given twice: positionally and as "
                        "sensitive_features=")
    return sensitive_features


def _parity_args(y_pred, sensitive, sensitive_features):
    """``(y_pred, sensitive)`` of a demographic parity call: riskopt's ``f(y_pred, a)`` /
    ``f(y_pred, sensitive_features=a)``, or fairlearn's ``f(y_true, y_pred,
    sensitive_features=a)`` (two positional arrays and the keyword: ``y_true`` is not used,
    as in fairlearn, but its length is checked)."""
    if sensitive_features is not None and sensitive is not None:
        _check_inputs(y_pred, sensitive, sensitive_features, None)
        return sensitive, sensitive_features
    return y_pred, _sensitive(sensitive, sensitive_features)


def _group_means(values, inverse, w, labels, what, mask=None):
    m = labels.shape[0]
    if mask is not None:
        w = w * mask
    tot = np.bincount(inverse, weights=w, minlength=m)
    empty = [(_plain(g)) for g, t in zip(labels, tot) if not t > 0]
    if empty:
        raise ValueError(f"group(s) {empty} of the sensitive attribute have no {what} "
                         "(zero total weight): the gap is undefined")
    return np.bincount(inverse, weights=w * values, minlength=m) / tot


def _as_float(name, values):
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric") from None
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def _gap(means):
    """Signed ``means[0] - means[1]`` for two groups; ``max - min`` for more."""
    if means.shape[0] == 2:
        return float(means[0] - means[1])
    return float(np.max(means) - np.min(means))


def equal_opportunity_difference(y_true, y_pred, sensitive=None, *, sensitive_features=None,
                                 pos_label=1, sample_weight=None, signed=None,
                                 method="between_groups"):
    r"""Equal opportunity difference (SOREL paper, Sec. 5.2): the gap in true-positive rates

    .. math::

        EO = P(\hat Y = 1 \mid A = a_0, Y = 1) - P(\hat Y = 1 \mid A = a_1, Y = 1)

    for a binary sensitive attribute with sorted values ``a_0 < a_1`` (signed: positive when
    group ``a_0`` is favoured); for more than two values the largest pairwise gap
    ``max_a TPR_a - min_a TPR_a`` (non-negative). fairlearn's ``equal_opportunity_difference``
    is the absolute value of this gap: ``signed=False``, the default when the attribute is
    passed as ``sensitive_features=`` (fairlearn's keyword gives fairlearn's convention; the
    positional form keeps SOREL's signed gap). ``method="to_overall"`` (unsigned only):
    fairlearn's ``max_a |TPR_a - TPR|``.

    Examples
    --------
    >>> from riskopt.metrics import equal_opportunity_difference
    >>> y_true = [1, 1, 1, 1, 0, 0]
    >>> y_pred = [1, 1, 1, 0, 1, 0]
    >>> a = [0, 0, 1, 1, 0, 1]          # TPR 1.0 in group 0, 0.5 in group 1
    >>> equal_opportunity_difference(y_true, y_pred, a)
    0.5
    >>> equal_opportunity_difference(y_true, y_pred, sensitive_features=a)   # fairlearn's call
    0.5
    """
    if signed is None:
        signed = sensitive_features is None
    sensitive = _sensitive(sensitive, sensitive_features)
    if not signed:
        return _compare(*_selection_rates(y_pred, sensitive, pos_label, sample_weight, y_true,
                                          pos_label), method, "difference")
    if method != "between_groups":
        raise ValueError(f"method={method!r} needs signed=False (a signed gap is between two "
                         "groups)")
    y_true, y_pred, labels, inv, w = _sensitive_groups(y_pred, sensitive, sample_weight,
                                                       y_true)
    pos = (y_true == pos_label).astype(np.float64)
    hit = (y_pred == pos_label).astype(np.float64)
    return _gap(_group_means(hit, inv, w, labels, "positive examples (y_true == pos_label)",
                             mask=pos))


def demographic_parity_difference(y_pred, sensitive=None, *, sensitive_features=None,
                                  pos_label=1, sample_weight=None, method="between_groups"):
    r"""Demographic parity difference (Agarwal et al. 2018): the largest gap between groups
    in the rate of positive predictions, ``max_a P(Yhat = 1 | A = a) - min_a P(Yhat = 1 | A = a)``
    (non-negative; the same as fairlearn's ``demographic_parity_difference``;
    ``method="to_overall"``: ``max_a |P(Yhat = 1 | A = a) - P(Yhat = 1)|``).

    Examples
    --------
    >>> from riskopt.metrics import demographic_parity_difference
    >>> demographic_parity_difference([1, 1, 0, 1, 0, 0], ["m", "m", "m", "f", "f", "f"])
    0.3333333333333333
    """
    y_pred, sensitive = _parity_args(y_pred, sensitive, sensitive_features)
    return _parity(y_pred, sensitive, pos_label, sample_weight, method, "difference")


def absolute_mean_difference(y_pred, sensitive=None, *, sensitive_features=None,
                             sample_weight=None):
    r"""SOREL's "SMD" (Sec. 5.2, regression and classification): the distance of each group's
    mean prediction to the overall mean prediction, summed over the groups,

    .. math::

        SMD = |E[\hat Y \mid A = 1] - E[\hat Y]| + |E[\hat Y \mid A = 0] - E[\hat Y]|

    for a binary attribute; the sum runs over every value of a multi-valued attribute
    (expectations under the empirical, optionally weighted, distribution).

    Examples
    --------
    >>> from riskopt.metrics import absolute_mean_difference
    >>> absolute_mean_difference([1.0, 3.0, 2.0, 6.0], [0, 0, 1, 1])   # means 2, 4; overall 3
    2.0
    """
    sensitive = _sensitive(sensitive, sensitive_features)
    _, y_pred, labels, inv, w = _sensitive_groups(y_pred, sensitive, sample_weight)
    y = _as_float("y_pred", y_pred)
    if not w.sum() > 0:
        raise ValueError("sample_weight sums to zero")
    overall = float(np.sum(w * y) / np.sum(w))
    means = _group_means(y, inv, w, labels, "samples")
    return float(np.sum(np.abs(means - overall)))


def _weighted_ecdf(values, weights, grid):
    order = np.argsort(values, kind="mergesort")
    v, cw = values[order], np.cumsum(weights[order])
    idx = np.searchsorted(v, grid, side="right")
    out = np.where(idx > 0, cw[np.maximum(idx - 1, 0)], 0.0)
    return out / cw[-1]


def statistical_parity_ks(y_pred, sensitive=None, *, sensitive_features=None,
                          sample_weight=None):
    r"""Statistical parity for regression (Prospect paper, Sec. 4.2): the Kolmogorov-Smirnov
    distance between the distributions of the predictions of the groups,
    ``max over pairs (a, b) of sup_t |F_a(t) - F_b(t)|`` with ``F_a`` the (weighted) empirical
    CDF of the predictions in group ``a``. 0 means identical prediction distributions, 1
    disjoint ones. With two groups and no weights this is ``scipy.stats.ks_2samp``'s statistic.

    Examples
    --------
    >>> from riskopt.metrics import statistical_parity_ks
    >>> statistical_parity_ks([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], [0, 0, 0, 1, 1, 1])
    1.0
    """
    sensitive = _sensitive(sensitive, sensitive_features)
    _, y_pred, labels, inv, w = _sensitive_groups(y_pred, sensitive, sample_weight)
    y = _as_float("y_pred", y_pred)
    grid = np.unique(y)
    cdfs = []
    for k in range(labels.shape[0]):
        mask = inv == k
        if not w[mask].sum() > 0:
            raise ValueError(f"group {_plain(labels[k])!r} of the sensitive attribute has no "
                             "samples (zero total weight): the gap is undefined")
        cdfs.append(_weighted_ecdf(y[mask], w[mask], grid))
    C = np.asarray(cdfs)
    return float(np.max(np.max(C, axis=0) - np.min(C, axis=0)))


# ---------------------------------------------------------------------------- fairlearn's
def _compare(rates, overall, method, kind):
    """fairlearn's difference / ratio of the per-group ``rates`` (module docstring)."""
    if method not in ("between_groups", "to_overall"):
        raise ValueError(f"method must be 'between_groups' or 'to_overall', got {method!r}")
    if kind == "difference":
        if method == "between_groups":
            return float(np.max(rates) - np.min(rates))
        return float(np.max(np.abs(rates - overall)))
    with np.errstate(divide="ignore", invalid="ignore"):
        if method == "between_groups":
            return float(np.min(rates) / np.max(rates))
        t = rates / overall
        return float(np.min(np.where(t < 1, t, 1.0 / t)))


def _selection_rates(y_pred, sensitive, pos_label, sample_weight, y_true=None, label=None):
    """``(per-group rates, overall rate)`` of ``y_pred == pos_label`` (among the samples
    with ``y_true == label`` when given)."""
    y_true, y_pred, labels, inv, w = _sensitive_groups(y_pred, sensitive, sample_weight,
                                                       y_true)
    hit = (y_pred == pos_label).astype(np.float64)
    mask = None if label is None else (y_true == label).astype(np.float64)
    what = "samples" if label is None else f"samples with y_true == {_plain(label)!r}"
    rates = _group_means(hit, inv, w, labels, what, mask=mask)
    ww = w if mask is None else w * mask
    return rates, float(np.sum(ww * hit) / np.sum(ww))


def demographic_parity_ratio(y_pred, sensitive=None, *, sensitive_features=None, pos_label=1,
                             sample_weight=None, method="between_groups"):
    """Demographic parity ratio: ``min_a P(Yhat = 1 | A = a) / max_a P(Yhat = 1 | A = a)``
    (fairlearn's ``demographic_parity_ratio``; ``method`` as in the module docstring).

    Examples
    --------
    >>> from riskopt.metrics import demographic_parity_ratio
    >>> pred, sex = [1, 1, 0, 1, 0, 0], ["m", "m", "m", "f", "f", "f"]
    >>> demographic_parity_ratio(pred, sex)          # rates 2/3 (m) and 1/3 (f)
    0.5
    >>> demographic_parity_ratio(pred, sex, method="to_overall")    # overall rate 1/2
    0.6666666666666666
    """
    y_pred, sensitive = _parity_args(y_pred, sensitive, sensitive_features)
    return _parity(y_pred, sensitive, pos_label, sample_weight, method, "ratio")


def _parity(y_pred, sensitive, pos_label, sample_weight, method, kind):
    """fairlearn's demographic parity ``kind`` (difference / ratio) of the selection rates."""
    return _compare(*_selection_rates(y_pred, sensitive, pos_label, sample_weight), method,
                    kind)


def _odds(y_true, y_pred, sensitive, pos_label, sample_weight, method, agg, kind):
    if agg not in ("worst_case", "mean"):
        raise ValueError(f"agg must be 'worst_case' or 'mean', got {agg!r}")
    values = np.unique(np.asarray(y_true))
    neg = [v for v in values if v != pos_label]
    if len(values) != 2 or len(neg) != 1:
        raise ValueError("equalized odds needs binary y_true with pos_label among its "
                         f"values; got the values {values.tolist()}")
    parts = [_compare(*_selection_rates(y_pred, sensitive, pos_label, sample_weight, y_true,
                                        label), method, kind)
             for label in (pos_label, neg[0])]
    if agg == "mean":
        return float(np.mean(parts))
    return float(max(parts) if kind == "difference" else min(parts))


def equalized_odds_difference(y_true, y_pred, sensitive=None, *, sensitive_features=None,
                              pos_label=1, sample_weight=None, method="between_groups",
                              agg="worst_case"):
    """Equalized odds difference (Hardt et al. 2016; fairlearn's convention): the larger
    (``agg="mean"``: the mean) of the true-positive-rate and the false-positive-rate
    differences between the groups (``method`` as in the module docstring).

    Examples
    --------
    >>> from riskopt.metrics import equalized_odds_difference
    >>> y_true = [1, 1, 0, 0, 1, 1, 0, 0]
    >>> y_pred = [1, 1, 1, 0, 1, 0, 0, 0]
    >>> a = [0, 0, 0, 0, 1, 1, 1, 1]     # TPR 1 vs 0.5, FPR 0.5 vs 0
    >>> equalized_odds_difference(y_true, y_pred, a)
    0.5
    """
    return _odds(y_true, y_pred, _sensitive(sensitive, sensitive_features), pos_label,
                 sample_weight, method, agg, "difference")


def equalized_odds_ratio(y_true, y_pred, sensitive=None, *, sensitive_features=None,
                         pos_label=1, sample_weight=None, method="between_groups",
                         agg="worst_case"):
    """Equalized odds ratio (fairlearn's convention): the smaller (``agg="mean"``: the mean)
    of the true-positive-rate and false-positive-rate ratios between the groups.

    Examples
    --------
    >>> from riskopt.metrics import equalized_odds_ratio
    >>> y_true, a = [1, 1, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]
    >>> y_pred = [1, 1, 1, 1, 1, 0, 1, 1]     # TPR 1 vs 0.5 (ratio 0.5), FPR 1 vs 1 (1)
    >>> equalized_odds_ratio(y_true, y_pred, a)
    0.5
    >>> equalized_odds_ratio(y_true, y_pred, a, agg="mean")
    0.75
    """
    return _odds(y_true, y_pred, _sensitive(sensitive, sensitive_features), pos_label,
                 sample_weight, method, agg, "ratio")
