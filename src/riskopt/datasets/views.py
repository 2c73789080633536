r"""Views of a data set written in its name: folds, sub-populations, binarised attributes.

Benchmark specs name data sets by a string, so the protocols of the fairness and shift
experiments are spelled as a chain of transformations after the base name, separated by
``/`` and applied left to right::

    law_school/fold2of5                    # 5-fold CV of train + test pooled, fold 2 as test
    adult/only:race=Black,White/binary:race=White/fold1of5
    adult/train:sex=Female                 # train on women, test on the others (men)
    iwildcam/kw:fallback=validation        # a loader keyword

* ``foldKofN`` -- pools the training and test splits and takes fold ``K`` (1-based) of a
  shuffled ``KFold(N)`` (seed 0) as the test split, the other folds as training split (SOREL's
  "4:1 split, five-fold cross-validation" for ``N = 5``);
* ``only:ATTR=V1,V2,...`` -- keeps the rows (both splits) whose attribute is one of the values;
* ``binary:ATTR=V`` -- replaces the attribute by ``V`` / ``non-V`` (the papers' binary
  sensitive attributes, e.g. White / non-White);
* ``train:ATTR=V`` -- trains on the rows of the training split with ``ATTR == V`` and tests on
  the rows of the test split with ``ATTR != V`` (out-of-distribution across groups);
* ``kw:KEY=VALUE`` -- a keyword argument of the base loader (first in the chain).

Examples
--------
>>> import riskopt as ro
>>> d = ro.datasets.load("yacht/fold1of5")
>>> d.n_train + d.n_test, d.n_test
(306, 62)
"""
import re

import numpy as np

__all__ = ["load_view", "is_view"]

_FOLD = re.compile(r"^fold(\d+)of(\d+)$")


def is_view(name):
    return isinstance(name, str) and "/" in name


def _rows(d, split, keep):
    """The dataset with only the rows ``keep`` (bool mask) of one split."""
    from dataclasses import replace

    X, y = getattr(d, f"X_{split}"), getattr(d, f"y_{split}")
    g = getattr(d, f"groups_{split}")
    g = None if g is None else {k: np.asarray(v)[keep] for k, v in g.items()}
    return replace(d, **{f"X_{split}": np.ascontiguousarray(X[keep]),
                         f"y_{split}": y[keep], f"groups_{split}": g})


def _attr(d, split, attr, where):
    g = getattr(d, f"groups_{split}") or {}
    if attr not in g:
        raise ValueError(f"{where}: the data set has no attribute {attr!r} "
                         f"(has: {sorted(g)})")
    return np.asarray(g[attr]).astype(str)


def _key_values(arg, where):
    attr, eq, vals = arg.partition("=")
    if not eq or not attr or not vals:
        raise ValueError(f"{where}: expected ATTR=VALUE, got {arg!r}")
    return attr, vals.split(",")


def _fold(d, k, n_folds, where):
    from dataclasses import replace

    from sklearn.model_selection import KFold

    if not 1 <= k <= n_folds or n_folds < 2:
        raise ValueError(f"{where}: need 1 <= K <= N and N >= 2")
    X = np.concatenate([d.X_train, d.X_test])
    y = np.concatenate([d.y_train, d.y_test])
    groups = None
    if d.groups_train is not None and d.groups_test is not None:
        groups = {a: np.concatenate([np.asarray(d.groups_train[a]), np.asarray(d.groups_test[a])])
                  for a in d.groups_train if a in d.groups_test}
    tr, te = list(KFold(n_folds, shuffle=True, random_state=0).split(X))[k - 1]
    pick = (lambda idx: None if groups is None else {a: v[idx] for a, v in groups.items()})
    return replace(d, X_train=np.ascontiguousarray(X[tr]), y_train=y[tr],
                   X_test=np.ascontiguousarray(X[te]), y_test=y[te],
                   groups_train=pick(tr), groups_test=pick(te))


def load_view(name, protocol="paper"):
    """Load ``BASE/step/step...`` (see the module docstring)."""
    from dataclasses import replace

    from . import load

    base, *steps = name.split("/")
    kwargs = {}
    while steps and steps[0].startswith("kw:"):
        key, vals = _key_values(steps.pop(0)[3:], f"{name}: kw")
        kwargs[key] = vals[0] if len(vals) == 1 else vals
    d = load(base, protocol=protocol, **kwargs)
    for step in steps:
        where = f"{name}: {step}"
        op, _, arg = step.partition(":")
        m = _FOLD.match(step)
        if m:
            d = _fold(d, int(m.group(1)), int(m.group(2)), where)
        elif op == "only":
            attr, vals = _key_values(arg, where)
            for split in ("train", "test"):
                d = _rows(d, split, np.isin(_attr(d, split, attr, where), vals))
        elif op == "binary":
            attr, vals = _key_values(arg, where)
            v = vals[0]
            for split in ("train", "test"):
                a = _attr(d, split, attr, where)
                g = dict(getattr(d, f"groups_{split}"))
                g[attr] = np.where(a == v, v, f"non-{v}")
                d = replace(d, **{f"groups_{split}": g})
        elif op == "train":
            attr, vals = _key_values(arg, where)
            d = _rows(d, "train", np.isin(_attr(d, "train", attr, where), vals))
            d = _rows(d, "test", ~np.isin(_attr(d, "test", attr, where), vals))
        else:
            raise ValueError(f"{where}: unknown step; use foldKofN, only:, binary:, train:, kw:")
        for split in ("train", "test"):
            if len(getattr(d, f"y_{split}")) == 0:
                raise ValueError(f"{where}: the {split} split is empty")
    return replace(d, name=name)
