"""The five tabular regression sets of the Prospect / SOREL papers (bundled, offline).

``protocol="paper"`` reproduces the papers' preparation (Prospect App. H): the full file is
split by ``train_test_split(test_size=0.2, random_state=42)``, X is standardised with the
training mean and std (``StandardScaler``), y with the training mean and std (``ddof=1``);
energy's target is Y2 (cooling load); power uses Sheet1. The papers' yacht has 244 training
rows because their loader read the headerless file with ``header=1``, dropping the first two
data lines (306 rows); ``protocol="paper"`` replicates that, ``protocol="clean"`` keeps all
308 rows (246 / 62) with the same preparation otherwise.
"""
import gzip
from dataclasses import dataclass, field
from importlib import resources
from typing import Optional

import numpy as np

REGRESSION = ("yacht", "energy", "concrete", "kin8nm", "power")

_TARGET = {"yacht": "resistance", "energy": "Y2", "concrete": -1, "kin8nm": "y", "power": "PE"}
_DROP = {"energy": ("Y1", "Y2")}


@dataclass
class Dataset:
    """A train/test split. ``groups_*`` hold sensitive / group attributes where known.

    ``task`` is "regression", "binary" (``y`` in {0., 1.}) or "multiclass" (``y`` the class index
    as float; ``info["n_classes"]`` the number of classes). ``groups_*`` map an attribute name to
    an array with one entry per row. ``X_val`` / ``y_val`` / ``groups_val`` hold a validation split
    where the source provides one (else None).
    """

    name: str
    task: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_names: list = field(default_factory=list)
    groups_train: Optional[dict] = None
    groups_test: Optional[dict] = None
    info: dict = field(default_factory=dict)
    X_val: Optional[np.ndarray] = None
    y_val: Optional[np.ndarray] = None
    groups_val: Optional[dict] = None

    @property
    def n_train(self):
        return self.X_train.shape[0]

    @property
    def n_test(self):
        return self.X_test.shape[0]

    @property
    def n_features(self):
        return self.X_train.shape[1]

    @property
    def groups(self):
        return self.groups_train


def read_bundled(name):
    """Raw table of a bundled file: ``(column_names, array)``."""
    ref = resources.files("riskopt.datasets") / "data" / f"{name}.csv.gz"
    with ref.open("rb") as raw, gzip.open(raw, "rt") as fh:
        header = fh.readline().strip().split(",")
        arr = np.loadtxt(fh, delimiter=",", dtype=np.float64, ndmin=2)
    return header, arr


def load_regression(name, protocol="paper", test_size=0.2, random_state=42):
    """Load one of ``REGRESSION`` prepared by ``protocol`` ("paper" or "clean")."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if name not in REGRESSION:
        raise ValueError(f"unknown regression dataset {name!r}; choose one of {REGRESSION}")
    if protocol not in ("paper", "clean"):
        raise ValueError(f"protocol must be 'paper' or 'clean', got {protocol!r}")
    cols, arr = read_bundled(name)
    if name == "yacht" and protocol == "paper":
        arr = arr[2:]  # the reference loader's header=1 quirk
    target = _TARGET[name]
    t = target if isinstance(target, int) else cols.index(target)
    t = t % len(cols)
    drop = {t} | {cols.index(c) for c in _DROP.get(name, ())}
    keep = [j for j in range(len(cols)) if j not in drop]
    X, y = arr[:, keep], arr[:, t]
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size,
                                              random_state=random_state)
    scaler = StandardScaler().fit(X_tr)
    mu, sd = y_tr.mean(), y_tr.std(ddof=1)
    return Dataset(
        name=name, task="regression",
        X_train=np.ascontiguousarray(scaler.transform(X_tr)), y_train=(y_tr - mu) / sd,
        X_test=np.ascontiguousarray(scaler.transform(X_te)), y_test=(y_te - mu) / sd,
        feature_names=[cols[j] for j in keep],
        info={"protocol": protocol, "target": cols[t], "y_mean": mu, "y_std": sd},
    )
