"""The five bundled regression sets of the Prospect / SOREL papers.

* ``protocol="paper"`` gives the papers' training sizes (yacht 244, energy 614, concrete 824,
  kin8nm 6553, power 7654) and ``protocol="clean"`` keeps all 308 yacht rows (246);
* X is standardised with the training statistics (mean 0, std 1), y with the training mean and
  std (ddof=1);
* with ``RISKOPT_DATA`` pointing at the folder of original files (``shared/data`` in this
  project), the bundled files equal the originals read with pandas (row and column counts from
  each ``PROVENANCE.md``, values exactly equal), and ``load`` equals an independent
  re-implementation of the reference loader (``ronakdm/prospect``, ``src/utils/data.py``) run
  on the originals.
"""
import hashlib
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import riskopt as ro
from riskopt.datasets.regression import read_bundled

PAPER = {  # name: (n_train, n_test, d)
    "yacht": (244, 62, 6),
    "energy": (614, 154, 8),
    "concrete": (824, 206, 8),
    "kin8nm": (6553, 1639, 8),
    "power": (7654, 1914, 4),
}
ORIGINALS = {
    "yacht": "yacht/yacht_hydrodynamics.data",
    "energy": "energy/ENB2012_data.xlsx",
    "concrete": "concrete/Concrete_Data.xls",
    "kin8nm": "kin8nm/dataset_2175_kin8nm.csv",
    "power": "power/Folds5x2_pp.xlsx",
}


@pytest.fixture(scope="module", params=list(PAPER))
def paper(request):
    return request.param, ro.datasets.load(request.param, protocol="paper")


def test_paper_protocol_sizes(paper):
    name, data = paper
    n_train, n_test, d = PAPER[name]
    assert data.X_train.shape == (n_train, d) and data.y_train.shape == (n_train,)
    assert data.X_test.shape == (n_test, d) and data.y_test.shape == (n_test,)
    assert data.n_train == n_train
    assert data.X_train.dtype == np.float64 and data.X_train.flags.c_contiguous


def test_clean_yacht_keeps_every_row():
    data = ro.datasets.load("yacht", protocol="clean")
    assert (data.n_train, data.X_test.shape[0]) == (246, 62)


def test_standardised_with_training_statistics(paper):
    name, data = paper
    np.testing.assert_allclose(data.X_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(data.X_train.std(axis=0), 1.0, rtol=1e-12)
    assert abs(data.y_train.mean()) < 1e-12
    assert data.y_train.std(ddof=1) == pytest.approx(1.0, rel=1e-12)
    assert np.all(np.isfinite(data.X_test)) and np.all(np.isfinite(data.y_test))
    # the test split is transformed with the training statistics, not its own
    assert abs(data.y_test.mean()) > 1e-6


def test_paper_training_sets_fit_the_benchmark_objective(paper):
    """The papers' problem on these sets is well posed (finite value and gradient at 0)."""
    name, data = paper
    obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), data.X_train, data.y_train,
                       l2_reg=1 / data.n_train)
    value, grad = obj.value_grad(obj.zeros())
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    assert value == pytest.approx(ro.CVaR(0.5, shift_cost=0.5).value(0.5 * data.y_train**2))


# --------------------------------------------------------------------------- against the originals
def _data_folder():
    root = os.environ.get("RISKOPT_DATA")
    if not root:
        pytest.skip("RISKOPT_DATA is not set: point it at the folder of original files "
                    "(e.g. shared/data) to compare the bundled copies with them")
    root = Path(root)
    missing = [p for p in ORIGINALS.values() if not (root / p).exists()]
    if missing:
        pytest.skip(f"RISKOPT_DATA={root} lacks the original files {missing}")
    return root


def _provenance(root, name):
    """(rows, columns, {file: sha256}) from the dataset's PROVENANCE.md."""
    text = (root / name / "PROVENANCE.md").read_text()
    rows, cols = map(int, re.search(r"(\d+) rows × (\d+) columns", text).groups())
    sha = dict(re.findall(r"\| `([^`]+)` \| [\d,]+ \| `([0-9a-f]{64})` \|", text))
    return rows, cols, sha


def _read_original(root, name, **kw):
    pd = pytest.importorskip("pandas")
    path = root / ORIGINALS[name]
    if name == "yacht":
        return pd.read_csv(path, sep=r"\s+", header=kw.get("header"))
    if name == "kin8nm":
        return pd.read_csv(path)
    if name == "concrete":
        pytest.importorskip("xlrd")
        with warnings.catch_warnings():  # pandas 3 deprecates the xlrd engine for .xls
            warnings.simplefilter("ignore")
            return pd.read_excel(path)
    pytest.importorskip("openpyxl")
    # power: the reference loader reads the first sheet, Sheet1 (of five shuffled copies)
    return pd.read_excel(path, sheet_name="Sheet1" if name == "power" else 0)


@pytest.mark.parametrize("name", list(PAPER))
def test_bundled_files_equal_the_originals(name):
    root = _data_folder()
    rows, cols, sha = _provenance(root, name)
    original = root / ORIGINALS[name]
    digest = hashlib.sha256(original.read_bytes()).hexdigest()
    assert sha[original.name] == digest, "the original differs from its PROVENANCE.md checksum"
    df = _read_original(root, name)
    assert df.shape == (rows, cols)
    assert not df.isna().any().any()
    header, arr = read_bundled(name)
    assert arr.shape == (rows, cols) and len(header) == cols
    np.testing.assert_array_equal(arr, df.to_numpy(dtype=np.float64))
    if name != "yacht":  # the yacht original has no header
        assert header == [str(c).strip().replace(",", ";") for c in df.columns]


@pytest.mark.parametrize("name,protocol", [(n, "paper") for n in PAPER] + [("yacht", "clean")])
def test_load_equals_the_reference_loader_on_the_originals(name, protocol):
    """Independent re-implementation of the reference preparation: yacht read with
    ``header=1`` (the paper's quirk) or without header (clean); energy X1..X8 -> Y2; the others
    all but the last column -> the last; ``train_test_split(test_size=0.2, random_state=42)``;
    ``StandardScaler`` on X, y standardised with the training mean and std (ddof=1)."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    root = _data_folder()
    if name == "yacht":
        raw = _read_original(root, name, header=1 if protocol == "paper" else None).to_numpy()
    else:
        raw = _read_original(root, name).to_numpy()
    X, y = (raw[:, :-2], raw[:, -1]) if name == "energy" else (raw[:, :-1], raw[:, -1])
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=42)
    scaler = StandardScaler().fit(X_tr)
    center, spread = y_tr.mean(), y_tr.std(ddof=1)
    data = ro.datasets.load(name, protocol=protocol)
    np.testing.assert_allclose(data.X_train, scaler.transform(X_tr), rtol=0, atol=1e-13)
    np.testing.assert_allclose(data.X_test, scaler.transform(X_te), rtol=0, atol=1e-13)
    np.testing.assert_allclose(data.y_train, (y_tr - center) / spread, rtol=0, atol=1e-13)
    np.testing.assert_allclose(data.y_test, (y_te - center) / spread, rtol=0, atol=1e-13)
