"""Dataset loaders.

>>> import riskopt as ro
>>> data = ro.datasets.load("yacht")       # the papers' preparation, bundled, offline
>>> data.X_train.shape
(244, 6)
"""
from .regression import REGRESSION, Dataset, load_regression


def load(name, protocol="paper", **kwargs):
    """Load a dataset by name (currently the bundled regression sets)."""
    if name in REGRESSION:
        return load_regression(name, protocol=protocol, **kwargs)
    raise ValueError(f"unknown dataset {name!r}; available: {list(REGRESSION)}")


def names():
    return list(REGRESSION)


__all__ = ["load", "names", "Dataset", "REGRESSION"]
