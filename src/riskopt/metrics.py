r"""Per-group evaluation: the error of every group, the worst and the median group.

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

__all__ = ["group_errors", "worst_group_error", "median_group_error", "GroupTable"]


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
