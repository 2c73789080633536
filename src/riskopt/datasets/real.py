"""Loaders of the real benchmark sets kept in the data folder (see :mod:`riskopt.datasets._files`).

Every loader returns a :class:`~riskopt.datasets.Dataset` and accepts the file-access keywords
``data_home`` (default ``$RISKOPT_DATA`` or ``~/.cache/riskopt``), ``download=True``,
``verify=True`` and ``base_url`` (a mirror; default ``$RISKOPT_DATA_URL``). Labels: regression
targets are floats; binary labels are ``{0., 1.}``; multiclass labels are the class index as a float
with the number of classes in ``info["n_classes"]``. Features are float64, C-contiguous; wherever
the papers standardise, the scaler (``sklearn.preprocessing.StandardScaler``) is fitted on the
training rows only and applied to the other splits.

Preparations (paper references in each loader's docstring):

=============  ==================================================================================
diabetes       Prospect App. H / ``scripts/download_diabetes.py`` (fairlearn SciPy-2021 tutorial
               preprocessing, 5,000 sampled rows, 80/20 split, one-hot ``drop_first``, 33 features)
acsincome      Prospect App. H (5,000 ACS rows, 202 standardised features, standardised log income);
               the training features were never published -> error, or ``fallback="test_split"``
amazon         Prospect App. H (frozen BERT features); no features were published -> error
iwildcam       Prospect App. H (ResNet50 + PCA, 157 features, 60 classes); training features were
               never published -> error, or ``fallback="validation"``
law_school     SOREL App. B.2 (about 20,800 rows, 10 features, race White / non-White, 4:1 split)
adult          UCI files' own train/test split, one-hot categoricals, standardised
compas         ProPublica's standard filter (6,172 rows), 80/20 split, standardised
mushrooms      LIBSVM file (SPL+ Sec. 6.2), 80/20 split (``test_size=0`` keeps all rows)
a9a            LIBSVM files' own train/test split
=============  ==================================================================================
"""
from __future__ import annotations

import re

import numpy as np

from ._files import MissingDataError, fetch
from .regression import Dataset

_IO_KEYS = ("data_home", "download", "verify", "base_url")


def _pandas():
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas is in the bench/dev extras
        raise ImportError("this loader reads CSV files with pandas; install it "
                          "(pip install 'riskopt[bench]')") from exc
    return pd


def _file(rel, io):
    return fetch(rel, **io)


def _split_idx(n, test_size, random_state):
    from sklearn.model_selection import train_test_split

    idx = np.arange(n)
    if not test_size:
        return idx, idx[:0]
    return train_test_split(idx, test_size=test_size, random_state=random_state)


def _fold_idx(n, fold, n_folds, random_state):
    from sklearn.model_selection import KFold

    if not 0 <= fold < n_folds:
        raise ValueError(f"fold must be in [0, {n_folds}), got {fold}")
    splits = list(KFold(n_splits=n_folds, shuffle=True, random_state=random_state).split(np.arange(n)))
    return splits[fold]


def _standardize(X_train, *others):
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X_train)
    out = [np.ascontiguousarray(scaler.transform(X_train), dtype=np.float64)]
    for X in others:
        out.append(None if X is None else
                   np.ascontiguousarray(scaler.transform(X), dtype=np.float64))
    return out, scaler


def _one_hot(values, name, categories=None, drop_first=True):
    """Dummy columns of a string column; categories sorted (as ``pandas.get_dummies``)."""
    values = np.asarray(values, dtype=str)
    cats = sorted(set(values.tolist())) if categories is None else list(categories)
    if drop_first:
        cats = cats[1:]
    cols = np.stack([values == c for c in cats], axis=1).astype(np.float64) if cats else \
        np.zeros((len(values), 0))
    return cols, [f"{name}_{c}" for c in cats]


def _sub(d, idx):
    return {k: np.asarray(v)[idx] for k, v in d.items()}


def _c(a):
    return np.ascontiguousarray(a, dtype=np.float64)


# ------------------------------------------------------------------------------------ diabetes
_SPECIALTIES = ("Missing", "InternalMedicine", "Emergency/Trauma", "Family/GeneralPractice",
                "Cardiology", "Surgery")
# (regex, label) applied in order with re.sub, as pandas' Series.replace(regex=dict) does
_DIAG_PATTERNS = (("[7][1-3][0-9]", "Musculoskeltal Issues"), ("250.*", "Diabetes"),
                  ("[4][6-9][0-9]|[5][0-1][0-9]|786", "Respitory Issues"),
                  ("[5][8-9][0-9]|[6][0-2][0-9]|788", "Genitourinary Issues"))
_DIAGNOSES = ("Respitory Issues", "Diabetes", "Genitourinary Issues", "Musculoskeltal Issues")
_DIABETES_NUMERIC = ("time_in_hospital", "num_lab_procedures", "num_procedures",
                     "num_medications", "number_diagnoses")
_DIABETES_FLAGS = ("medicare", "medicaid", "had_emergency", "had_inpatient_days",
                   "had_outpatient_days")
_DIABETES_CATEGORICAL = ("discharge_disposition_id", "admission_source_id", "medical_specialty",
                         "primary_diagnosis", "max_glu_serum", "A1Cresult", "insulin", "change",
                         "diabetesMed")


def _diagnosis_paper(code):
    for pat, label in _DIAG_PATTERNS:
        code = re.sub(pat, label, code)
    return code if code in _DIAGNOSES else "Other"


def _diagnosis_clean(code):
    try:
        v = float(code)  # V and E codes are not numeric -> Other
    except ValueError:
        return "Other"
    i = int(v)
    if 710 <= i <= 739:
        return "Musculoskeltal Issues"
    if i == 250:
        return "Diabetes"
    if 460 <= i <= 519 or i == 786:
        return "Respitory Issues"
    if 580 <= i <= 629 or i == 788:
        return "Genitourinary Issues"
    return "Other"


def _ffill(values, missing):
    """Forward-fill entries equal to ``missing`` with the previous value (first stays as is)."""
    out = np.array(values, dtype=object)
    last = None
    for i, v in enumerate(out):
        if v == missing:
            if last is not None:
                out[i] = last
        else:
            last = v
    return out


def load_diabetes(protocol="paper", n_samples=5000, test_size=0.2, random_state=42, **io):
    """UCI Diabetes 130-US hospitals: readmission within 30 days (binary), Prospect preparation.

    Prospect (Mehta et al. 2024) App. H (f) and its ``scripts/download_diabetes.py``: the fairlearn
    SciPy-2021 tutorial preprocessing of ``diabetic_data.csv`` (101,766 rows); target
    ``readmitted == "<30"``; ``n_samples`` rows drawn with ``DataFrame.sample(random_state)``
    (``RandomState(random_state).permutation(n)[:n_samples]``); 80/20
    ``train_test_split(random_state)``; 19 columns, categoricals one-hot encoded with the first
    (sorted) category dropped, flags as 0/1: 33 features (Prospect Table 2); features standardised
    with training statistics. Protected attributes (not features): ``gender`` (Prospect's
    statistical-parity attribute) and ``race`` (``?`` -> ``Unknown``).

    ``protocol="paper"`` keeps two quirks of the reference code that change the features:
    ``payer_code`` ``?`` entries are forward-filled from the previous row (pandas' ``replace`` of
    a set without a value pads) before ``medicare`` / ``medicaid`` are derived, and the primary
    diagnosis is regex-substituted, so codes with decimals outside ``250.x`` (e.g. ``715.2``)
    fall in ``Other``. ``protocol="clean"`` treats ``?`` payers as unknown and maps ICD-9 codes by
    their numeric range. ``n_samples=None`` uses all rows.
    """
    if protocol not in ("paper", "clean"):
        raise ValueError(f"protocol must be 'paper' or 'clean', got {protocol!r}")
    pd = _pandas()
    use = (_DIABETES_NUMERIC + _DIABETES_CATEGORICAL[:3] + _DIABETES_CATEGORICAL[4:]
           + ("payer_code", "number_emergency", "number_inpatient", "number_outpatient", "diag_1",
              "readmitted", "gender", "race"))
    df = pd.read_csv(_file("diabetes/diabetic_data.csv.gz", io), dtype=str, keep_default_na=False,
                     usecols=list(use))
    n = len(df)
    cols = {}
    for c in _DIABETES_NUMERIC:
        cols[c] = df[c].astype(np.int64).to_numpy().astype(np.float64)
    payer = df["payer_code"].to_numpy(dtype=object)
    if protocol == "paper":
        payer = _ffill(payer, "?")
    cols["medicare"] = (payer == "MC").astype(np.float64)
    cols["medicaid"] = (payer == "MD").astype(np.float64)
    cols["had_emergency"] = (df["number_emergency"].astype(np.int64) > 0).to_numpy(np.float64)
    cols["had_inpatient_days"] = (df["number_inpatient"].astype(np.int64) > 0).to_numpy(np.float64)
    cols["had_outpatient_days"] = (df["number_outpatient"].astype(np.int64) > 0).to_numpy(np.float64)
    cat = {}
    cat["discharge_disposition_id"] = np.where(
        df["discharge_disposition_id"].astype(np.int64) == 1, "Discharged to Home", "Other")
    src = df["admission_source_id"].astype(np.int64).to_numpy()
    cat["admission_source_id"] = np.where(np.isin(src, (1, 2, 3)), "Referral",
                                          np.where(src == 7, "Emergency", "Other"))
    spec = df["medical_specialty"].replace("?", "Missing").to_numpy(dtype=str)
    cat["medical_specialty"] = np.where(np.isin(spec, _SPECIALTIES), spec, "Other")
    diag = _diagnosis_paper if protocol == "paper" else _diagnosis_clean
    codes, inv = np.unique(df["diag_1"].to_numpy(dtype=str), return_inverse=True)
    cat["primary_diagnosis"] = np.array([diag(c) for c in codes])[inv.ravel()]
    for c in ("max_glu_serum", "A1Cresult", "insulin", "change", "diabetesMed"):
        cat[c] = df[c].to_numpy(dtype=str)   # "None" is a category, as in pandas < 2 read_csv
    y = (df["readmitted"] == "<30").to_numpy(np.float64)
    groups = {"gender": df["gender"].to_numpy(dtype=str),
              "race": df["race"].replace("?", "Unknown").to_numpy(dtype=str)}

    rows = np.arange(n) if n_samples is None else \
        np.random.RandomState(random_state).permutation(n)[:n_samples]
    tr, te = _split_idx(len(rows), test_size, random_state)
    tr, te = rows[tr], rows[te]
    sample = rows
    # numeric and flag columns first, then dummies (pandas.get_dummies column order)
    names = list(_DIABETES_NUMERIC) + list(_DIABETES_FLAGS)
    blocks = [np.stack([cols[c] for c in names], axis=1)]
    for c in _DIABETES_CATEGORICAL:
        cats = sorted(set(cat[c][sample].tolist()))
        d, nm = _one_hot(cat[c], c, categories=cats)
        blocks.append(d)
        names += nm
    X = np.concatenate(blocks, axis=1)
    (X_tr, X_te), _ = _standardize(X[tr], X[te])
    return Dataset(
        name="diabetes", task="binary", X_train=X_tr, y_train=_c(y[tr]), X_test=X_te,
        y_test=_c(y[te]), feature_names=names, groups_train=_sub(groups, tr),
        groups_test=_sub(groups, te),
        info={"protocol": protocol, "n_samples": n_samples, "random_state": random_state,
              "target": "readmitted == '<30'", "positive_label": 1.0, "n_classes": 2,
              "standardized": True, "rows_in_file": n,
              "reference": "Prospect (Mehta et al. 2024) App. H; fairlearn SciPy 2021 tutorial"})


# ------------------------------------------------------------------------------------ acsincome
_RAC1P = {1: "White alone", 2: "Black or African American alone", 3: "American Indian alone",
          4: "Alaska Native alone", 5: "American Indian and Alaska Native tribes specified",
          6: "Asian alone", 7: "Native Hawaiian and Other Pacific Islander alone",
          8: "Some Other Race alone", 9: "Two or More Races"}
_SEX = {1: "Male", 2: "Female"}


def _acs_groups(path):
    pd = _pandas()
    meta = pd.read_csv(path)
    return {"race": meta["RAC1P"].to_numpy().astype(np.int64),
            "sex": meta["SEX"].to_numpy().astype(np.int64)}


def load_acsincome(fallback=None, test_size=0.2, random_state=42, **io):
    """ACSIncome (folktables, 2018 ACS PUMS, all states), Prospect/DRAGO preparation: regression.

    Prospect App. H (g): 5,000 rows sampled from the OpenML ACSIncome export, features AGEP,
    COW, SCHL, MAR, RELP, WKHP (categoricals one-hot, ``drop_first``: 202 columns), target
    ``log(PINCP)``, 80/20 split, features and target standardised with training statistics
    (4,000 / 1,000 rows). Groups (not features): ``race`` (RAC1P code, Prospect's
    statistical-parity attribute; ``info["group_codes"]``) and ``sex`` (SEX code).

    The training features ``X_train.npy`` were never published in a form we could obtain (see
    ``shared/data/acsincome/PROVENANCE.md``). Without them this raises
    :class:`~riskopt.datasets.MissingDataError`, unless

    - a copy has been placed at ``<data folder>/acsincome/X_train.npy`` (used unverified, shape
      checked), or
    - ``fallback="test_split"``: the 1,000 published test rows (``X_test``, ``y_test``, their
      metadata) are split ``test_size`` / ``random_state`` again (800 / 200) and re-standardised
      (features and target) with the new training rows' statistics. This is *not* the paper's
      training set: use it for smoke tests and fairness-metric plumbing only.
    """
    if fallback not in (None, "test_split"):
        raise ValueError(f"fallback must be None or 'test_split', got {fallback!r}")
    X_test = np.load(_file("acsincome/X_test.npy", io))
    y_test = np.load(_file("acsincome/y_test.npy", io))
    g_test = _acs_groups(_file("acsincome/metadata_te.csv", io))
    info = {"target": "standardised log(PINCP)", "group_codes": {"race": _RAC1P, "sex": _SEX},
            "standardized": True,
            "reference": "Prospect (Mehta et al. 2024) App. H; folktables (Ding et al. 2021)"}
    names = [f"x{j}" for j in range(X_test.shape[1])]  # column names were not published
    try:
        X_train_path = _file("acsincome/X_train.npy", io)
    except MissingDataError as exc:
        if fallback is None:
            raise MissingDataError(
                f"acsincome: {exc}\nWhat exists: X_test (1000 x 202), y_train (4000), y_test, and "
                "the train/test metadata. Options: load('acsincome', fallback='test_split') "
                "splits the 1,000 published test rows 80/20 (not the paper's training set), or "
                "put the original X_train.npy (4000 x 202) in the data folder.") from exc
        tr, te = _split_idx(X_test.shape[0], test_size, random_state)
        (X_tr, X_te), _ = _standardize(X_test[tr], X_test[te])
        mu, sd = y_test[tr].mean(), y_test[tr].std(ddof=1)
        info.update(fallback="test_split", y_mean=mu, y_std=sd,
                    note="train/test both drawn from the published 1,000-row test split; "
                         "the paper's 4,000 training features are not available")
        return Dataset("acsincome", "regression", X_tr, _c((y_test[tr] - mu) / sd), X_te,
                       _c((y_test[te] - mu) / sd), names, _sub(g_test, tr), _sub(g_test, te), info)
    X_train = np.load(X_train_path)
    if X_train.shape != (4000, X_test.shape[1]):
        raise ValueError(f"acsincome X_train.npy has shape {X_train.shape}, expected (4000, "
                         f"{X_test.shape[1]})")
    y_train = np.load(_file("acsincome/y_train.npy", io))
    g_train = _acs_groups(_file("acsincome/metadata_tr.csv", io))
    info.update(fallback=None, note="arrays as published (already standardised)")
    return Dataset("acsincome", "regression", _c(X_train), _c(y_train), _c(X_test), _c(y_test),
                   names, g_train, g_test, info)


# ------------------------------------------------------------------------------------ amazon
def amazon_labels(**io):
    """The published part of the Prospect amazon set: labels and WILDS metadata, no features.

    Returns ``{split: {"y": (10000,) int, "z": (10000, 6) int}}`` for train / val / test. Columns
    of ``z`` (inferred from the values, undocumented upstream): 0 reviewer id (disjoint across
    splits), 1 product id, 2 category id, 3 year index, 4 label (= y), 5 split flag.
    """
    return {s: {"y": np.load(_file(f"amazon/y_{s}.npy", io)),
                "z": np.load(_file(f"amazon/z_{s}.npy", io))} for s in ("train", "val", "test")}


def load_amazon(**io):
    """WILDS Amazon reviews, Prospect preparation: 5-class rating classification.

    Prospect App. H (h): frozen features of a BERT model fine-tuned on 10,000 held-out reviews,
    unit-normalised and reduced by PCA; 10,000 train / 10,000 val / 10,000 test reviews with
    disjoint reviewers; groups are the true labels (worst-group error). Features standardised with
    training statistics (Prospect App. H.1).

    The feature files ``X_train.npy``, ``X_val.npy``, ``X_test.npy`` were never published in a form
    we could obtain, so this raises :class:`~riskopt.datasets.MissingDataError` unless copies have
    been placed in ``<data folder>/amazon/`` (used unverified). The labels and metadata that do
    exist are returned by :func:`amazon_labels`.
    """
    missing, paths = [], {}
    for s in ("train", "val", "test"):
        try:
            paths[s] = _file(f"amazon/X_{s}.npy", io)
        except MissingDataError as exc:
            missing.append((s, exc))
    if missing:
        raise MissingDataError(
            "amazon: the feature matrices "
            + ", ".join(f"X_{s}.npy" for s, _ in missing)
            + " are missing. " + str(missing[0][1])
            + "\nOnly the labels and WILDS metadata exist (riskopt.datasets.amazon_labels()); "
              "no features can be provided without rebuilding them (WILDS download + BERT "
              "fine-tuning on a GPU).")
    lab = amazon_labels(**io)
    X = {s: np.load(p) for s, p in paths.items()}
    for s in X:
        if X[s].shape[0] != lab[s]["y"].shape[0]:
            raise ValueError(f"amazon X_{s}.npy has {X[s].shape[0]} rows, y_{s} has "
                             f"{lab[s]['y'].shape[0]}")
    (X_tr, X_va, X_te), _ = _standardize(X["train"], X["val"], X["test"])
    y = {s: _c(lab[s]["y"]) for s in lab}
    g = {s: {"label": lab[s]["y"].astype(np.int64)} for s in lab}
    return Dataset("amazon", "multiclass", X_tr, y["train"], X_te, y["test"],
                   [f"x{j}" for j in range(X_tr.shape[1])], g["train"], g["test"],
                   {"n_classes": 5, "standardized": True, "features": "user-supplied, unverified",
                    "reference": "Prospect (Mehta et al. 2024) App. H"},
                   X_val=X_va, y_val=y["val"], groups_val=g["val"])


# ------------------------------------------------------------------------------------ iwildcam
def load_iwildcam(fallback=None, **io):
    """WILDS iWildCam2020, Prospect preparation: 60-class linear probe on ResNet50 features.

    Prospect App. H (i): ImageNet-pretrained ResNet50 features, PCA to 157 components; 60
    classes with at least 100 training images; 20,000 train / 5,000 validation / 5,000 test
    images. Features standardised with training statistics (the Prospect loader fits a
    ``StandardScaler`` on ``X_train``). Groups are the true labels (median group error).

    ``X_train.npy`` (20,000 x 157) was never published in a form we could obtain, so by default
    this raises :class:`~riskopt.datasets.MissingDataError`. Options:

    - put the original ``X_train.npy`` in ``<data folder>/iwildcam/`` (used unverified, shape
      checked);
    - ``fallback="validation"``: train on the 5,000 validation images (``X_validation``,
      ``y_validation``, which cover 47 of the 60 classes) and test on the 5,000 test images,
      standardising with the validation statistics. Not the paper's training set.
    """
    if fallback not in (None, "validation"):
        raise ValueError(f"fallback must be None or 'validation', got {fallback!r}")
    X_val = np.load(_file("iwildcam/X_validation.npy", io)).astype(np.float64)
    y_val = np.load(_file("iwildcam/y_validation.npy", io))
    X_test = np.load(_file("iwildcam/X_test.npy", io)).astype(np.float64)
    y_test = np.load(_file("iwildcam/y_test.npy", io))
    y_train = np.load(_file("iwildcam/y_train.npy", io))
    info = {"n_classes": 60, "standardized": True,
            "reference": "Prospect (Mehta et al. 2024) App. H; WILDS iWildCam (Beery et al. 2020)"}
    names = [f"pc{j}" for j in range(X_test.shape[1])]
    try:
        X_train_path = _file("iwildcam/X_train.npy", io)
    except MissingDataError as exc:
        if fallback is None:
            raise MissingDataError(
                f"iwildcam: {exc}\nWhat exists: X_validation / X_test (5000 x 157 each) and the "
                "labels of all three splits. Options: load('iwildcam', fallback='validation') "
                "trains on the 5,000 validation images and tests on the test images (not the "
                "paper's training set), or put the original X_train.npy (20000 x 157) in the "
                "data folder.") from exc
        (X_tr, X_te), _ = _standardize(X_val, X_test)
        info.update(fallback="validation",
                    note="trained on the published validation split; the paper's 20,000 "
                         "training features are not available")
        return Dataset("iwildcam", "multiclass", X_tr, _c(y_val), X_te, _c(y_test), names,
                       {"label": y_val.astype(np.int64)}, {"label": y_test.astype(np.int64)}, info)
    X_train = np.load(X_train_path).astype(np.float64)
    if X_train.shape != (y_train.shape[0], X_test.shape[1]):
        raise ValueError(f"iwildcam X_train.npy has shape {X_train.shape}, expected "
                         f"({y_train.shape[0]}, {X_test.shape[1]})")
    (X_tr, X_va, X_te), _ = _standardize(X_train, X_val, X_test)
    info.update(fallback=None)
    return Dataset("iwildcam", "multiclass", X_tr, _c(y_train), X_te, _c(y_test), names,
                   {"label": y_train.astype(np.int64)}, {"label": y_test.astype(np.int64)}, info,
                   X_val=X_va, y_val=_c(y_val), groups_val={"label": y_val.astype(np.int64)})


# ------------------------------------------------------------------------------------ law school
_LAW_TARGETS = {"clean": {"ugpa": "regression", "zfygpa": "regression", "pass_bar": "binary"},
                "kusner": {"ZFYA": "regression", "first_pf": "binary"}}


def load_law_school(variant="clean", target=None, test_size=0.2, random_state=42, fold=None,
                    n_folds=5, **io):
    """LSAC bar passage study (Wightman 1998): first-year law GPA (regression) or bar passage.

    SOREL (2025) App. B.2: about 20,800 students, 10 features, sensitive attribute race
    (White / non-White), features standardised with training statistics (targets are not), a 4:1
    split (``fold=k`` picks fold ``k`` of a shuffled ``n_folds``-fold split, as in the paper's
    five-fold cross-validation; the default ``fold=None`` is one ``train_test_split``).

    ``variant="clean"`` (default): ``law_school_clean.csv`` (20,798 rows, Le Quy et al. 2022).
    Target ``ugpa`` (default), ``zfygpa`` or ``pass_bar``; features: the other ten columns except
    ``race`` (with ``ugpa``: ``decile1b, decile3, lsat, zfygpa, zgpa, fulltime, fam_inc, male,
    tier, pass_bar``). SOREL does not name the column ("predicting a student's GPA", 10
    features); ``ugpa`` (undergraduate GPA) is the target of the fair-regression literature for
    this set, and with it ERM's test SMD on race is 0.07 and CVaR / ESRM / extremile improve it
    in the paper's order, against 0.05 and 25 / 20.5 / 15.6 % in SOREL's Table 2; with
    ``zfygpa`` (the former default, an inference that the data folder's PROVENANCE.md still
    names) ERM's SMD is 0.7 and the spectral risks make it worse
    (``benchmarks/exact_optima.py``). Groups: ``race`` (White / Non-White) and ``sex`` (from
    ``male``).

    ``variant="kusner"``: ``law_data.csv`` (21,791 rows, Kusner et al. 2017). Target ``ZFYA``
    (default) or ``first_pf``; features ``LSAT``, ``UGPA`` (the fairness-unaware inputs of that
    paper); groups ``race`` (8 categories) and ``sex`` (the file's 1 / 2 codes).
    """
    if variant not in _LAW_TARGETS:
        raise ValueError(f"variant must be 'clean' or 'kusner', got {variant!r}")
    target = target or next(iter(_LAW_TARGETS[variant]))
    if target not in _LAW_TARGETS[variant]:
        raise ValueError(f"target for variant {variant!r} must be one of "
                         f"{list(_LAW_TARGETS[variant])}, got {target!r}")
    task = _LAW_TARGETS[variant][target]
    pd = _pandas()
    if variant == "clean":
        df = pd.read_csv(_file("law_school/law_school_clean.csv", io))
        feats = [c for c in df.columns if c not in ("race", target)]
        groups = {"race": df["race"].to_numpy(dtype=str),
                  "sex": np.where(df["male"].to_numpy() == 1, "male", "female")}
    else:
        df = pd.read_csv(_file("law_school/law_data.csv", io), index_col=0)
        feats = ["LSAT", "UGPA"]
        groups = {"race": df["race"].to_numpy(dtype=str), "sex": df["sex"].to_numpy(np.int64)}
    X = df[feats].to_numpy(np.float64)
    y = df[target].to_numpy(np.float64)
    if fold is None:
        tr, te = _split_idx(len(df), test_size, random_state)
    else:
        tr, te = _fold_idx(len(df), fold, n_folds, random_state)
    (X_tr, X_te), _ = _standardize(X[tr], X[te])
    return Dataset(
        "law_school", task, X_tr, _c(y[tr]), X_te, _c(y[te]), feats, _sub(groups, tr),
        _sub(groups, te),
        {"variant": variant, "target": target, "fold": fold, "standardized": True,
         **({"n_classes": 2} if task == "binary" else {}),
         "reference": "SOREL App. B.2; Wightman (1998)"})


# ------------------------------------------------------------------------------------ adult
_ADULT_COLS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
               "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
               "hours-per-week", "native-country", "income")
_ADULT_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss",
                  "hours-per-week")
_ADULT_CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship",
                      "race", "sex", "native-country")


def load_adult(drop_sensitive=False, **io):
    """UCI Adult: income > 50K (binary), the files' own split (32,561 train / 16,281 test).

    Used with sex (and race) groups by the ROC-fairness experiments of the SONEX/ALEXR2 paper
    (default split). Preparation: the six numeric columns as they are; the eight categorical
    columns one-hot encoded with the categories of the training file (sorted, first dropped;
    ``?`` is a category; a test category unseen in training gets all zeros); all columns
    standardised with training statistics. ``drop_sensitive=True`` leaves ``race`` and ``sex`` out
    of the features. Groups: ``sex``, ``race``, ``education`` (16 levels; ``education*sex`` gives
    the 32 groups of the many-group group-DRO spec ``fcco_group_dro_many``).
    """
    pd = _pandas()
    kw = dict(header=None, names=list(_ADULT_COLS), skipinitialspace=True, keep_default_na=False)
    tr = pd.read_csv(_file("adult/adult.data.gz", io), **kw)
    te = pd.read_csv(_file("adult/adult.test.gz", io), skiprows=1, **kw)
    cats = [c for c in _ADULT_CATEGORICAL if not (drop_sensitive and c in ("race", "sex"))]

    def design(df, ref):
        blocks, names = [df[list(_ADULT_NUMERIC)].to_numpy(np.float64)], list(_ADULT_NUMERIC)
        for c in cats:
            d, nm = _one_hot(df[c].to_numpy(dtype=str), c,
                             categories=sorted(set(ref[c].to_numpy(dtype=str).tolist())))
            blocks.append(d)
            names += nm
        return np.concatenate(blocks, axis=1), names

    X_tr, names = design(tr, tr)
    X_te, _ = design(te, tr)
    (X_tr, X_te), _ = _standardize(X_tr, X_te)

    def label(df):
        return _c(df["income"].str.rstrip(".").to_numpy(dtype=str) == ">50K")

    def grp(df):
        return {"sex": df["sex"].to_numpy(dtype=str), "race": df["race"].to_numpy(dtype=str),
                "education": df["education"].to_numpy(dtype=str)}

    return Dataset("adult", "binary", X_tr, label(tr), X_te, label(te), names, grp(tr), grp(te),
                   {"target": "income > 50K", "n_classes": 2, "standardized": True,
                    "drop_sensitive": drop_sensitive,
                    "reference": "UCI Adult (Kohavi & Becker 1996); SONEX/ALEXR2 Sec. 5"})


# ------------------------------------------------------------------------------------ compas
_COMPAS_NUMERIC = ("age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count")
_COMPAS_CATEGORICAL = ("c_charge_degree", "sex", "race")


def load_compas(filtered=True, drop_sensitive=False, test_size=0.2, random_state=42, **io):
    """ProPublica COMPAS: two-year recidivism (binary), Caucasian / non-Caucasian groups.

    ``filtered=True`` applies ProPublica's standard filter (``-30 <= days_b_screening_arrest <=
    30``, ``is_recid != -1``, ``c_charge_degree != "O"``, ``score_text != "N/A"``: 6,172 of 7,214
    rows). Features: ``age, juv_fel_count, juv_misd_count, juv_other_count, priors_count`` and
    one-hot ``c_charge_degree, sex, race`` (first sorted category dropped; ``drop_sensitive=True``
    leaves ``sex`` and ``race`` out); COMPAS's own scores are not features. 80/20
    ``train_test_split(random_state)``, standardised with training statistics. Groups: ``race``,
    ``sex`` and ``caucasian`` (Caucasian / Non-Caucasian, the groups of the SONEX/ALEXR2 paper).
    """
    pd = _pandas()
    df = pd.read_csv(_file("compas/compas-scores-two-years.csv", io))
    n_file = len(df)
    if filtered:
        d = df["days_b_screening_arrest"]
        df = df[(d <= 30) & (d >= -30) & (df["is_recid"] != -1) & (df["c_charge_degree"] != "O")
                & (df["score_text"] != "N/A")].reset_index(drop=True)
    cats = [c for c in _COMPAS_CATEGORICAL if not (drop_sensitive and c in ("race", "sex"))]
    blocks, names = [df[list(_COMPAS_NUMERIC)].to_numpy(np.float64)], list(_COMPAS_NUMERIC)
    for c in cats:
        d, nm = _one_hot(df[c].to_numpy(dtype=str), c)
        blocks.append(d)
        names += nm
    X = np.concatenate(blocks, axis=1)
    y = df["two_year_recid"].to_numpy(np.float64)
    race = df["race"].to_numpy(dtype=str)
    groups = {"race": race, "sex": df["sex"].to_numpy(dtype=str),
              "caucasian": np.where(race == "Caucasian", "Caucasian", "Non-Caucasian")}
    tr, te = _split_idx(len(df), test_size, random_state)
    (X_tr, X_te), _ = _standardize(X[tr], X[te])
    return Dataset("compas", "binary", X_tr, _c(y[tr]), X_te, _c(y[te]), names,
                   _sub(groups, tr), _sub(groups, te),
                   {"target": "two_year_recid", "n_classes": 2, "filtered": filtered,
                    "rows_in_file": n_file, "standardized": True, "drop_sensitive": drop_sensitive,
                    "reference": "ProPublica (Angwin et al. 2016); SONEX/ALEXR2 Sec. 5"})


# ------------------------------------------------------------------------------------ LIBSVM
def _svmlight(path, n_features, sparse=False):
    """``(X, y)`` of a LIBSVM file: X dense float64, or a float64 CSR matrix with ``sparse``."""
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=n_features, zero_based=False)
    if sparse:
        return X.tocsr().astype(np.float64), y
    return np.ascontiguousarray(X.toarray(), dtype=np.float64), y


def _sparse_or_dense(X, sparse, standardize):
    if sparse and standardize:
        raise ValueError("sparse=True keeps the LIBSVM 0/1 features as they are: "
                         "standardize=True would make them dense (the estimators scale "
                         "sparse columns themselves)")
    return X if sparse else _c(X)


def load_mushrooms(test_size=0.2, random_state=42, standardize=False, sparse=False, **io):
    """LIBSVM ``mushrooms`` (UCI Mushroom one-hot): 8,124 rows x 112 binary features.

    The SPL+ paper (Sec. 6.2) runs CVaR logistic regression on it. The file has no split: the
    default is ``train_test_split(test_size=0.2, random_state=42)``; ``test_size=0`` keeps all rows
    for training (empty test set). Labels: LIBSVM ``1`` (poisonous, 3,916) -> 1, ``2`` (edible,
    4,208) -> 0. Features are the 0/1 indicators as distributed (``standardize=True`` to scale).
    ``sparse=True`` returns them as scipy CSR matrices (not with ``standardize``).
    """
    X, lab = _svmlight(_file("mushrooms/mushrooms", io), 112, sparse)
    y = (lab == 1).astype(np.float64)
    tr, te = _split_idx(X.shape[0], test_size, random_state)
    X_tr, X_te = X[tr], X[te]
    X_tr, X_te = _sparse_or_dense(X_tr, sparse, standardize), _sparse_or_dense(X_te, sparse, False)
    if standardize:
        (X_tr, X_te), _ = _standardize(X_tr, X_te)
    return Dataset("mushrooms", "binary", X_tr, _c(y[tr]), X_te, _c(y[te]),
                   [f"f{j + 1}" for j in range(112)], None, None,
                   {"label_map": {1: 1.0, 2: 0.0}, "n_classes": 2, "standardized": standardize,
                    "reference": "LIBSVM binary datasets; SPL+ Sec. 6.2"})


def load_a9a(standardize=False, sparse=False, **io):
    """LIBSVM ``a9a`` (UCI Adult, Platt's binarisation): 32,561 train / 16,281 test x 123.

    The files' own split; labels ``+1`` (income > 50K) -> 1, ``-1`` -> 0; 0/1 features as
    distributed (``standardize=True`` to scale with training statistics). No group attributes
    (the binarised columns are not documented in the file). ``sparse=True`` returns the
    features as scipy CSR matrices (11 % non-zero; not with ``standardize``).
    """
    X_tr, a = _svmlight(_file("a9a/a9a", io), 123, sparse)
    X_te, b = _svmlight(_file("a9a/a9a.t", io), 123, sparse)
    X_tr, X_te = _sparse_or_dense(X_tr, sparse, standardize), _sparse_or_dense(X_te, sparse, False)
    if standardize:
        (X_tr, X_te), _ = _standardize(X_tr, X_te)
    return Dataset("a9a", "binary", X_tr, _c(a > 0), X_te, _c(b > 0),
                   [f"f{j + 1}" for j in range(123)], None, None,
                   {"label_map": {1: 1.0, -1: 0.0}, "n_classes": 2, "standardized": standardize,
                    "reference": "LIBSVM binary datasets (Platt 1998)"})


LOADERS = {
    "diabetes": load_diabetes, "acsincome": load_acsincome, "amazon": load_amazon,
    "iwildcam": load_iwildcam, "law_school": load_law_school, "adult": load_adult,
    "compas": load_compas, "mushrooms": load_mushrooms, "a9a": load_a9a,
}
