r"""Index and batch samplers shared by the solvers and the PyTorch side.

Randomness enters every solver as sample indices drawn here, in Python, from the solver's seeded
``numpy.random.Generator`` (``state.rng``); the kernels and their NumPy twins only consume the
indices, so both can be fed the same sequence. The same samplers drive PyTorch training loops:
each sampler class is an iterable of index batches, usable as a ``torch.utils.data.DataLoader``
``batch_sampler``.

============================  ==================================================================
function                      draws
============================  ==================================================================
:func:`uniform`               ``size`` indices uniform on ``[0, n)``, with replacement
:func:`permutation_batches`   a random permutation cut into ``n // b`` batches of ``b`` distinct
                              indices (the ``n mod b`` left-over samples are not used)
:func:`stratified_batches`    per batch, ``B1`` distinct groups (uniform) and ``B2`` indices of
                              each group (uniform with replacement): the per-group sampler of
                              the compositional methods (group DRO, constrained learning)
============================  ==================================================================

Examples
--------
>>> import numpy as np
>>> from riskopt import samplers
>>> rng = np.random.default_rng(0)
>>> samplers.permutation_batches(rng, 10, 3).shape
(3, 3)
>>> idx, grp = samplers.stratified_batches(rng, np.array([0, 0, 1, 1, 2]), 2, 2, n_batches=4)
>>> idx.shape, grp.shape
((4, 4), (4, 2))
"""
import numpy as np

from ._validation import check_int


def uniform(rng, n, size):
    """``size`` indices uniform on ``[0, n)`` with replacement (``int64``)."""
    return rng.integers(0, n, size=size)


def permutation_batches(rng, n, batch_size):
    """``(n // b, b)`` indices: consecutive slices of a random permutation of ``range(n)``."""
    b = min(check_int("batch_size", batch_size), n)
    nb = n // b
    return np.ascontiguousarray(rng.permutation(n)[: nb * b].reshape(nb, b))


def group_index(groups):
    """``(labels, members)``: the distinct group labels and, per group, its sample indices."""
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.size == 0:
        raise ValueError(f"groups must be a non-empty 1-D array, got shape {groups.shape}")
    labels, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(labels.size + 1))
    members = [order[bounds[g]:bounds[g + 1]] for g in range(labels.size)]
    return labels, members


def stratified_batches(rng, groups, groups_per_batch, per_group, n_batches=1):
    """Per-group batches: ``B1 = groups_per_batch`` distinct groups, ``B2 = per_group`` samples each.

    Returns ``(indices, group_ids)`` of shapes ``(n_batches, B1 * B2)`` (the ``B2`` samples of
    the first group, then of the second, ...) and ``(n_batches, B1)`` (positions in the sorted
    distinct labels of ``groups``). Groups are drawn uniformly without replacement, samples within
    a group uniformly with replacement.
    """
    labels, members = group_index(groups)
    m = labels.size
    b1 = check_int("groups_per_batch", groups_per_batch)
    b2 = check_int("per_group", per_group)
    n_batches = check_int("n_batches", n_batches)
    if b1 > m:
        raise ValueError(f"groups_per_batch={b1} exceeds the number of groups ({m})")
    idx = np.empty((n_batches, b1 * b2), dtype=np.int64)
    gid = np.empty((n_batches, b1), dtype=np.int64)
    for t in range(n_batches):
        chosen = rng.choice(m, size=b1, replace=False)
        gid[t] = chosen
        for k, g in enumerate(chosen):
            mem = members[g]
            idx[t, k * b2:(k + 1) * b2] = mem[rng.integers(0, mem.size, size=b2)]
    return idx, gid


class _BatchSampler:
    """Iterable of index batches (a ``DataLoader`` ``batch_sampler``); reseeded by ``seed``."""

    def __init__(self, random_state=None):
        self.random_state = random_state
        self._rng = np.random.default_rng(random_state)

    def __iter__(self):
        for row in self.draw(self._rng):
            yield row.tolist()


class UniformSampler(_BatchSampler):
    """``n_batches`` batches of ``batch_size`` indices uniform on ``[0, n)`` (with replacement)."""

    def __init__(self, n, batch_size=1, n_batches=None, random_state=None):
        super().__init__(random_state)
        self.n = check_int("n", n)
        self.batch_size = check_int("batch_size", batch_size)
        self.n_batches = (n // self.batch_size if n_batches is None
                          else check_int("n_batches", n_batches))

    def draw(self, rng):
        return uniform(rng, self.n, (self.n_batches, self.batch_size))

    def __len__(self):
        return self.n_batches


class PermutationSampler(_BatchSampler):
    """One epoch without replacement: :func:`permutation_batches` as an iterable."""

    def __init__(self, n, batch_size, random_state=None):
        super().__init__(random_state)
        self.n = check_int("n", n)
        self.batch_size = check_int("batch_size", batch_size)

    def draw(self, rng):
        return permutation_batches(rng, self.n, self.batch_size)

    def __len__(self):
        return self.n // min(self.batch_size, self.n)


class GroupSampler(_BatchSampler):
    """:func:`stratified_batches` as an iterable (``n_batches`` per epoch)."""

    def __init__(self, groups, groups_per_batch, per_group, n_batches=None, random_state=None):
        super().__init__(random_state)
        self.groups = np.asarray(groups)
        group_index(self.groups)  # validates
        self.groups_per_batch = groups_per_batch
        self.per_group = per_group
        size = int(groups_per_batch) * int(per_group)
        self.n_batches = (max(1, self.groups.size // size) if n_batches is None
                          else check_int("n_batches", n_batches))

    def draw(self, rng):
        return stratified_batches(rng, self.groups, self.groups_per_batch, self.per_group,
                                  self.n_batches)[0]

    def __len__(self):
        return self.n_batches
