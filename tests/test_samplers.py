"""The shared index samplers (riskopt.samplers): the draws the solvers consume."""
import numpy as np
import pytest

from riskopt import samplers


def test_uniform_is_the_generator_stream():
    a = samplers.uniform(np.random.default_rng(3), 10, 50)
    b = np.random.default_rng(3).integers(0, 10, size=50)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n, b", [(10, 3), (10, 10), (7, 20), (64, 8)])
def test_permutation_batches_are_distinct_and_complete(n, b):
    idx = samplers.permutation_batches(np.random.default_rng(0), n, b)
    bb = min(b, n)
    assert idx.shape == (n // bb, bb)
    assert len(np.unique(idx)) == idx.size  # without replacement
    assert idx.min() >= 0 and idx.max() < n


def test_stratified_batches_draw_from_the_chosen_groups():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.array(["a", "b", "c", "d"]), [5, 1, 7, 3])
    idx, gid = samplers.stratified_batches(rng, groups, groups_per_batch=3, per_group=4,
                                           n_batches=200)
    labels = np.array(["a", "b", "c", "d"])
    assert idx.shape == (200, 12) and gid.shape == (200, 3)
    for t in range(200):
        assert len(set(gid[t])) == 3  # distinct groups in a batch
        for k in range(3):
            block = idx[t, 4 * k:4 * (k + 1)]
            assert np.all(groups[block] == labels[gid[t, k]])
    # groups chosen uniformly: each appears in 3/4 of the batches (binomial sd ~ 6)
    counts = np.bincount(gid.ravel(), minlength=4)
    assert np.all(np.abs(counts - 150) < 40), counts


def test_group_index_and_errors():
    labels, members = samplers.group_index([2, 0, 2, 1])
    np.testing.assert_array_equal(labels, [0, 1, 2])
    assert [m.tolist() for m in members] == [[1], [3], [0, 2]]
    with pytest.raises(ValueError, match="groups must be a non-empty 1-D array"):
        samplers.group_index([])
    with pytest.raises(ValueError, match="exceeds the number of groups"):
        samplers.stratified_batches(np.random.default_rng(0), [0, 1], 3, 1)
    with pytest.raises(ValueError, match="batch_size"):
        samplers.permutation_batches(np.random.default_rng(0), 5, 0)


def test_sampler_classes_are_batch_iterables():
    for s in (samplers.UniformSampler(20, batch_size=4, random_state=0),
              samplers.PermutationSampler(20, batch_size=6, random_state=0),
              samplers.GroupSampler(np.arange(20) % 4, 2, 3, random_state=0)):
        batches = list(s)
        assert len(batches) == len(s) and all(isinstance(b, list) for b in batches)
        assert all(0 <= i < 20 for b in batches for i in b)
    # reproducible from the seed
    assert list(samplers.PermutationSampler(9, 3, random_state=5)) == \
        list(samplers.PermutationSampler(9, 3, random_state=5))
