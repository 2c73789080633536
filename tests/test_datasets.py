"""riskopt.datasets: the data-folder loaders, the file registry (checksums, downloads, errors),
the synthetic generators, names() and info().

Real files are read through ``RISKOPT_DATA``: the variable if it is set, else the folder
``../shared/data`` next to the repository root (no absolute paths here). Tests that need the real
files are skipped when neither exists. Nothing here goes online: ``RISKOPT_DATA_URL`` points at a
closed loopback port unless a test serves files itself from 127.0.0.1. The five bundled regression
sets are tested in ``test_datasets_regression.py``.
"""
import gzip
import hashlib
import http.server
import os
import shutil
import socket
import threading
import zipfile
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import riskopt.datasets as ds
from riskopt.datasets import _files

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir():
    """``$RISKOPT_DATA`` if set, else ``<repo root>/../shared/data`` if it exists, else None."""
    env = os.environ.get("RISKOPT_DATA")
    if env:
        return Path(env)
    cand = REPO_ROOT.parent / "shared" / "data"
    return cand if cand.is_dir() else None


DATA = shared_data_dir()
needs_data = pytest.mark.skipif(DATA is None or not (DATA / "adult").is_dir(),
                                reason="real data folder not found (set RISKOPT_DATA)")


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEAD_URL = f"http://127.0.0.1:{_closed_port()}/"


@pytest.fixture(scope="module", autouse=True)
def data_env():
    """Point RISKOPT_DATA at the real files and RISKOPT_DATA_URL at nothing (no network)."""
    with pytest.MonkeyPatch.context() as mp:
        if DATA is not None:
            mp.setenv("RISKOPT_DATA", str(DATA))
        mp.setenv("RISKOPT_DATA_URL", DEAD_URL)
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        yield


@pytest.fixture(scope="module")
def diabetes():
    return ds.load("diabetes")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    """serve(folder) -> base URL of an HTTP server on 127.0.0.1 (ephemeral port) for ``folder``."""
    servers = []

    def start(folder):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                              partial(_Quiet, directory=str(folder)))
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _no_partials(folder):
    return not [p for p in Path(folder).rglob("*.part")]


# ------------------------------------------------------------------------ registry vs. the folder
@needs_data
def test_registry_lists_every_shared_file_with_its_provenance_checksum():
    on_disk = {p.relative_to(DATA).as_posix() for p in DATA.rglob("*")
               if p.is_file() and p.name not in ("PROVENANCE.md", "README.md")}
    assert on_disk <= set(ds.FILES), on_disk - set(ds.FILES)
    for rel in on_disk:
        entry = ds.FILES[rel]
        assert entry.sha256 == _sha(DATA / rel), rel
        assert entry.size == (DATA / rel).stat().st_size, rel
        assert entry.sources and all(s.url.startswith(("http://", "https://"))
                                     for s in entry.sources), rel
    # the never-published files are registered, without a checksum, and absent
    unpublished = {r for r, e in ds.FILES.items() if e.sha256 is None}
    assert unpublished == {"amazon/X_train.npy", "amazon/X_val.npy", "amazon/X_test.npy",
                           "iwildcam/X_train.npy", "acsincome/X_train.npy"}
    assert not unpublished & on_disk


# ------------------------------------------------------------------------ loaders: shapes, groups
# (name, kwargs, n_train, n_test, d, task, group attributes); rows as in each PROVENANCE.md
SHAPES = [
    ("diabetes", {}, 4000, 1000, 33, "binary", {"gender", "race"}),
    ("acsincome", {"fallback": "test_split"}, 800, 200, 202, "regression", {"race", "sex"}),
    ("iwildcam", {"fallback": "validation"}, 5000, 5000, 157, "multiclass", {"label"}),
    ("law_school", {}, 16638, 4160, 10, "regression", {"race", "sex"}),
    ("law_school", {"target": "pass_bar"}, 16638, 4160, 10, "binary", {"race", "sex"}),
    ("law_school", {"variant": "kusner"}, 17432, 4359, 2, "regression", {"race", "sex"}),
    ("adult", {}, 32561, 16281, 100, "binary", {"sex", "race", "education"}),
    ("adult", {"drop_sensitive": True}, 32561, 16281, 95, "binary",
     {"sex", "race", "education"}),
    ("compas", {}, 4937, 1235, 12, "binary", {"race", "sex", "caucasian"}),
    ("compas", {"filtered": False}, 5771, 1443, 12, "binary", {"race", "sex", "caucasian"}),
    ("mushrooms", {}, 6499, 1625, 112, "binary", set()),
    ("mushrooms", {"test_size": 0}, 8124, 0, 112, "binary", set()),
    ("a9a", {}, 32561, 16281, 123, "binary", set()),
]


@needs_data
@pytest.mark.parametrize("name, kwargs, n_train, n_test, d, task, groups", SHAPES,
                         ids=[f"{s[0]}-{'-'.join(map(str, s[1].values())) or 'default'}"
                              for s in SHAPES])
def test_loader_shapes_task_and_groups(name, kwargs, n_train, n_test, d, task, groups, diabetes):
    data = diabetes if (name, kwargs) == ("diabetes", {}) else ds.load(name, **kwargs)
    assert data.name == name and data.task == task
    assert data.X_train.shape == (n_train, d) and data.X_test.shape == (n_test, d)
    assert data.y_train.shape == (n_train,) and data.y_test.shape == (n_test,)
    for a in (data.X_train, data.X_test, data.y_train, data.y_test):
        assert a.dtype == np.float64 and a.flags.c_contiguous and np.isfinite(a).all()
    assert len(data.feature_names) == d
    if task == "binary":
        assert set(np.unique(data.y_train)) == {0.0, 1.0}
    if task == "multiclass":
        assert np.all(data.y_train == np.round(data.y_train))
        assert data.y_train.max() < data.info["n_classes"]
    assert set(data.groups_train or {}) == groups and set(data.groups_test or {}) == groups
    for g in groups:
        assert len(data.groups_train[g]) == n_train and len(data.groups_test[g]) == n_test
        assert len(np.unique(data.groups_train[g])) >= 2


@needs_data
@pytest.mark.parametrize("name", ["diabetes", "adult", "compas", "law_school", "iwildcam",
                                  "acsincome"])
def test_features_standardised_with_training_statistics(name, diabetes):
    kw = {"iwildcam": {"fallback": "validation"}, "acsincome": {"fallback": "test_split"}}
    data = diabetes if name == "diabetes" else ds.load(name, **kw.get(name, {}))
    mean, std = data.X_train.mean(axis=0), data.X_train.std(axis=0)
    assert np.allclose(mean, 0.0, atol=1e-10)
    varying = std > 1e-12
    assert np.allclose(std[varying], 1.0)
    assert data.info["standardized"] is True


@needs_data
def test_diabetes_paper_preparation(diabetes):
    # Prospect Table 2: 33 features, 4,000 / 1,000; groups as in the fairlearn tutorial
    assert set(diabetes.groups_train["gender"]) <= {"Female", "Male", "Unknown/Invalid"}
    assert "Unknown" in set(diabetes.groups_train["race"]) | set(diabetes.groups_test["race"])
    assert 0.05 < diabetes.y_train.mean() < 0.2   # readmitted '<30' is 11,357 / 101,766 overall
    assert diabetes.feature_names[:5] == ["time_in_hospital", "num_lab_procedures",
                                          "num_procedures", "num_medications", "number_diagnoses"]
    assert "max_glu_serum_None" in diabetes.feature_names  # "None" is a category, not missing


@needs_data
def test_diabetes_clean_protocol_and_all_rows():
    clean = ds.load("diabetes", protocol="clean", n_samples=None)
    assert clean.n_train + clean.n_test == 101_766          # PROVENANCE: 101,766 rows
    assert (clean.n_train, clean.n_test, clean.n_features) == (81_412, 20_354, 33)
    n_pos = clean.y_train.sum() + clean.y_test.sum()
    assert n_pos == 11_357                                   # readmitted '<30'


@needs_data
def test_label_and_group_counts_match_provenance():
    adult = ds.load("adult")
    assert adult.y_train.sum() == 7841 and adult.y_test.sum() == 3846
    a9a = ds.load("a9a")
    assert a9a.y_train.sum() == 7841 and a9a.y_test.sum() == 3846
    mush = ds.load("mushrooms", test_size=0)
    assert mush.y_train.sum() == 3916                        # LIBSVM label 1
    assert set(np.unique(mush.X_train)) == {0.0, 1.0}
    compas = ds.load("compas", filtered=False)
    assert compas.y_train.sum() + compas.y_test.sum() == 3251
    law = ds.load("law_school", target="pass_bar")
    assert (law.y_train == 0).sum() + (law.y_test == 0).sum() == 2293
    race = np.concatenate([law.groups_train["race"], law.groups_test["race"]])
    assert (race == "White").sum() == 17_491 and (race == "Non-White").sum() == 3_307
    kus = ds.load("law_school", variant="kusner")
    race = np.concatenate([kus.groups_train["race"], kus.groups_test["race"]])
    assert len(np.unique(race)) == 8 and (race == "White").sum() == 18_285


@needs_data
def test_law_school_default_target_is_the_undergraduate_gpa():
    import pandas as pd

    from riskopt.datasets._files import get_data_home

    raw = pd.read_csv(get_data_home() / "law_school" / "law_school_clean.csv")
    law = ds.load("law_school", fold=0)
    assert law.info["target"] == "ugpa" and len(law.feature_names) == 10
    assert "ugpa" not in law.feature_names and "zfygpa" in law.feature_names
    y = np.concatenate([law.y_train, law.y_test])
    assert np.array_equal(np.sort(y), np.sort(raw["ugpa"].to_numpy(float)))
    old = ds.load("law_school", target="zfygpa", fold=0)
    assert "ugpa" in old.feature_names and old.info["target"] == "zfygpa"


@needs_data
def test_law_school_folds_partition_the_rows():
    tests = [ds.load("law_school", fold=k).n_test for k in range(5)]
    assert sum(tests) == 20_798 and max(tests) - min(tests) <= 1
    with pytest.raises(ValueError, match="fold"):
        ds.load("law_school", fold=5)


@needs_data
def test_acsincome_fallback_keeps_groups_aligned_and_restandardises_target():
    data = ds.load("acsincome", fallback="test_split")
    assert abs(data.y_train.mean()) < 1e-12 and np.isclose(data.y_train.std(ddof=1), 1.0)
    assert set(np.unique(data.groups_train["sex"])) == {1, 2}
    assert 1 in data.groups_train["race"] and data.info["fallback"] == "test_split"


# ------------------------------------------------------------------------ missing files
@needs_data
def test_amazon_without_features_raises_and_labels_are_available():
    with pytest.raises(ds.MissingDataError) as exc:
        ds.load("amazon")
    msg = str(exc.value)
    assert "X_train.npy" in msg and "amazon_labels" in msg and str(DATA) in msg
    labels = ds.amazon_labels()
    for s in ("train", "val", "test"):
        y, z = labels[s]["y"], labels[s]["z"]
        assert y.shape == (10_000,) and z.shape == (10_000, 6)
        assert np.array_equal(z[:, 4], y)
    assert np.bincount(labels["train"]["y"]).tolist() == [124, 258, 919, 2990, 5709]


@needs_data
@pytest.mark.parametrize("name, missing, hint", [
    ("iwildcam", "iwildcam/X_train.npy", "fallback='validation'"),
    ("acsincome", "acsincome/X_train.npy", "fallback='test_split'"),
])
def test_missing_training_features_give_clear_error(name, missing, hint):
    with pytest.raises(ds.MissingDataError) as exc:
        ds.load(name)
    msg = str(exc.value)
    assert missing in msg and hint in msg and "cannot be downloaded" in msg


@needs_data
def test_user_supplied_unpublished_file_is_unverified_and_shape_checked(tmp_path):
    for f in ("X_validation", "X_test", "y_train", "y_validation", "y_test"):
        (tmp_path / "iwildcam").mkdir(exist_ok=True)
        os.symlink(DATA / "iwildcam" / f"{f}.npy", tmp_path / "iwildcam" / f"{f}.npy")
    # a wrong-sized stand-in (the validation features) must be rejected, not silently used
    os.symlink(DATA / "iwildcam" / "X_validation.npy", tmp_path / "iwildcam" / "X_train.npy")
    with pytest.warns(UserWarning, match="unverified"), pytest.raises(ValueError, match="shape"):
        ds.load("iwildcam", data_home=tmp_path)


def test_never_published_file_is_not_downloaded(tmp_path):
    with pytest.raises(ds.MissingDataError, match="cannot be downloaded") as exc:
        ds.fetch("iwildcam/X_train.npy", data_home=tmp_path)
    assert "RISKOPT_DATA" in str(exc.value)
    assert not any(tmp_path.iterdir())


def test_offline_error_names_file_folder_and_env_var(tmp_path):
    with pytest.raises(ds.MissingDataError) as exc:
        ds.fetch("adult/adult.data.gz", data_home=tmp_path)     # RISKOPT_DATA_URL is dead
    msg = str(exc.value)
    assert "adult/adult.data.gz" in msg and str(tmp_path / "adult") in msg
    assert "RISKOPT_DATA" in msg
    # the failed download leaves no empty folder behind (it would pass for present data)
    assert not (tmp_path / "adult").exists()
    with pytest.raises(ds.MissingDataError):
        ds.fetch("adult/adult.data.gz", data_home=tmp_path / "new" / "home")
    assert not (tmp_path / "new").exists()
    with pytest.raises(ds.MissingDataError, match="download=False") as exc:
        ds.load("compas", data_home=tmp_path, download=False)
    assert "compas/compas-scores-two-years.csv" in str(exc.value)
    assert _no_partials(tmp_path)


def test_data_home_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("RISKOPT_DATA", str(tmp_path / "a"))
    assert ds.get_data_home() == tmp_path / "a"
    assert ds.get_data_home(tmp_path / "b") == tmp_path / "b"
    monkeypatch.delenv("RISKOPT_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ds.get_data_home() == tmp_path / "xdg" / "riskopt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ds.get_data_home() == tmp_path / "home" / ".cache" / "riskopt"


# ------------------------------------------------------------------------ checksums
@needs_data
def test_corrupt_existing_file_is_rejected_and_left_in_place(tmp_path):
    rel = "yacht/yacht_hydrodynamics.data"
    (tmp_path / "yacht").mkdir()
    target = tmp_path / rel
    shutil.copy(DATA / rel, target)
    assert ds.fetch(rel, data_home=tmp_path) == target
    raw = bytearray(target.read_bytes())
    raw[100] = ord("9") if raw[100] != ord("9") else ord("8")
    target.write_bytes(bytes(raw))
    os.utime(target, ns=(1, 1))   # a new mtime: the per-process cache must not hide the change
    with pytest.raises(ds.ChecksumError, match="does not match"):
        ds.fetch(rel, data_home=tmp_path)
    assert target.exists()          # never delete a file we did not download
    assert ds.fetch(rel, data_home=tmp_path, verify=False) == target


@needs_data
def test_gz_file_accepted_by_content_checksum(tmp_path):
    rel = "adult/adult.test.gz"
    content = gzip.decompress((DATA / rel).read_bytes())
    (tmp_path / "adult").mkdir()
    target = tmp_path / rel
    target.write_bytes(gzip.compress(content, mtime=0))     # other bytes, same content
    assert _sha(target) != ds.FILES[rel].sha256
    assert ds.fetch(rel, data_home=tmp_path) == target
    target.write_bytes(gzip.compress(content[:-10], mtime=0))
    os.utime(target, ns=(2, 2))
    with pytest.raises(ds.ChecksumError):
        ds.fetch(rel, data_home=tmp_path)


@needs_data
def test_verification_is_cached_per_process(tmp_path, monkeypatch):
    rel = "a9a/a9a.t"
    (tmp_path / "a9a").mkdir()
    shutil.copy(DATA / rel, tmp_path / rel)
    ds.fetch(rel, data_home=tmp_path)
    calls = []
    real_hash = _files._sha256_file
    monkeypatch.setattr(_files, "_sha256_file", lambda p: calls.append(p) or real_hash(p))
    ds.fetch(rel, data_home=tmp_path)
    assert calls == []                          # cached: no re-hash
    os.utime(tmp_path / rel, ns=(3, 3))
    ds.fetch(rel, data_home=tmp_path)
    assert len(calls) == 1                      # changed mtime: verified again


# ------------------------------------------------------------------------ downloads (loopback)
@needs_data
def test_download_from_loopback_mirror_is_verified_and_atomic(tmp_path, serve):
    base = serve(DATA)
    home = tmp_path / "home"
    path = ds.fetch("mushrooms/mushrooms", data_home=home, base_url=base)
    assert path == home / "mushrooms" / "mushrooms"
    assert _sha(path) == ds.FILES["mushrooms/mushrooms"].sha256
    assert _no_partials(home)
    data = ds.load("mushrooms", data_home=home, base_url=base, test_size=0)
    assert data.X_train.shape == (8124, 112)


@needs_data
def test_download_via_env_vars_then_load(tmp_path, serve, monkeypatch):
    monkeypatch.setenv("RISKOPT_DATA", str(tmp_path))
    monkeypatch.setenv("RISKOPT_DATA_URL", serve(DATA))
    data = ds.load("law_school")
    assert data.X_train.shape == (16638, 10)
    assert (tmp_path / "law_school" / "law_school_clean.csv").is_file()
    assert ds.info("law_school")["present"] is True


def test_corrupt_download_is_deleted_and_rejected(tmp_path, serve):
    rel = "yacht/yacht_hydrodynamics.data"
    mirror = tmp_path / "mirror"
    (mirror / "yacht").mkdir(parents=True)
    (mirror / rel).write_bytes(b"1 2 3 4 5 6 7\n" * 300)
    home = tmp_path / "home"
    with pytest.raises(ds.ChecksumError, match="discarded"):
        ds.fetch(rel, data_home=home, base_url=serve(mirror))
    assert not (home / rel).exists() and _no_partials(home)


def test_download_missing_on_mirror_is_a_clear_error(tmp_path, serve):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ds.MissingDataError, match="404"):
        ds.fetch("a9a/a9a", data_home=tmp_path / "home", base_url=serve(empty))


def test_download_zip_member_and_gzip_it(tmp_path, serve, monkeypatch):
    """The diabetes / adult path of the registry: a member of a zip archive, checked by its content
    sha256 and stored gzip-compressed (a small stand-in archive keeps the test fast)."""
    rel = "diabetes/diabetic_data.csv.gz"
    content = b"encounter_id,readmitted\r\n1,NO\r\n2,<30\r\n"
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with zipfile.ZipFile(mirror / "dataset_diabetes.zip", "w") as zf:
        zf.writestr("dataset_diabetes/diabetic_data.csv", content)
        zf.writestr("dataset_diabetes/IDs_mapping.csv", b"x")
    base = serve(mirror)
    entry = ds.FILES[rel]
    assert entry.sources[0].member == "dataset_diabetes/diabetic_data.csv" and entry.sources[0].gzip
    src = replace(entry.sources[0], url=base + "dataset_diabetes.zip")
    monkeypatch.setitem(_files.FILES, rel, replace(
        entry, sources=(src,), content_sha256=hashlib.sha256(content).hexdigest()))
    monkeypatch.delenv("RISKOPT_DATA_URL")
    home = tmp_path / "home"
    path = ds.fetch(rel, data_home=home)
    assert path == home / rel and gzip.decompress(path.read_bytes()) == content
    _files._VERIFIED.clear()
    ds.verify_file(path, rel)                      # accepted through the content checksum
    with zipfile.ZipFile(mirror / "dataset_diabetes.zip", "w") as zf:   # wrong member content
        zf.writestr("dataset_diabetes/diabetic_data.csv", content[:-5])
    with pytest.raises(ds.ChecksumError, match="discarded"):
        ds.fetch(rel, data_home=tmp_path / "home2")
    assert not (tmp_path / "home2" / rel).exists() and _no_partials(tmp_path / "home2")


# ------------------------------------------------------------------------ synthetic generators
SPL_CASES = [(loss, noise) for loss in ("squared", "absolute", "logistic")
             for noise in ("normal", "gumbel", "lognormal")]


@pytest.mark.parametrize("loss, noise", SPL_CASES)
def test_splplus_generators_follow_the_paper(loss, noise):
    data = ds.load(f"splplus_{loss}_{noise}", n_samples=20_000, n_test=500, random_state=3)
    X, y, theta = data.X_train, data.y_train, data.info["coef"]
    assert X.shape == (20_000, 10) and data.X_test.shape == (500, 10)
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0)           # unit sphere
    if loss == "logistic":
        assert data.task == "binary" and set(np.unique(y)) == {0.0, 1.0}
        assert np.all((theta >= 0) & (theta <= 10)) and theta.max() > 1
    else:
        assert data.task == "regression"
        assert np.all((theta >= 0) & (theta <= 1))
        zeta = y - X @ theta
        # SPL+ Table 1: N(0, sigma=2), Gumbel(0, beta=4), LogNormal(mu=2, sigma=1)
        if noise == "normal":
            assert abs(zeta.mean()) < 0.1 and abs(zeta.std() - 2.0) < 0.1
        elif noise == "gumbel":
            assert abs(zeta.mean() - 4 * np.euler_gamma) < 0.15
            assert abs(zeta.std() - 4 * np.pi / np.sqrt(6)) < 0.2
        else:
            assert zeta.min() > 0 and abs(np.median(np.log(zeta)) - 2.0) < 0.05
    again = ds.make_splplus(loss, noise, n_samples=20_000, n_test=500, random_state=3)
    assert np.array_equal(again.X_train, X) and np.array_equal(again.y_test, data.y_test)
    other = ds.make_splplus(loss, noise, n_samples=100, random_state=4)
    assert not np.array_equal(other.X_train, X[:100])


def test_heavy_tailed_regression():
    data = ds.load("heavy_tailed_regression", n_samples=50_000, n_test=10, df=2.5,
                   random_state=0)
    resid = data.y_train - data.X_train @ data.info["coef"]
    kurt = np.mean((resid - resid.mean()) ** 4) / resid.var() ** 2
    assert kurt > 10                                   # a Gaussian has 3
    assert data.X_test.shape == (10, 10)
    for noise in ("pareto", "lognormal"):
        d = ds.make_heavy_tailed_regression(200, noise=noise, heavy_features=True, random_state=1)
        assert d.X_train.shape == (200, 10) and np.isfinite(d.y_train).all()
    with pytest.raises(ValueError, match="noise"):
        ds.make_heavy_tailed_regression(10, noise="cauchy")


@pytest.mark.parametrize("task", ["regression", "binary"])
def test_group_shift_generators(task):
    data = ds.load(f"group_shift_{task}", n_samples=20_000, n_test=20_000, random_state=0)
    g_tr, g_te = data.groups_train["group"], data.groups_test["group"]
    assert data.groups is data.groups_train and g_tr.shape == (20_000,)
    assert abs(np.mean(g_tr == 1) - 0.1) < 0.01 and abs(np.mean(g_te == 1) - 0.5) < 0.02
    coefs = data.info["coefs"]
    assert not np.allclose(coefs[0], coefs[1])
    if task == "regression":
        for g in (0, 1):   # each group's own coefficients are recovered by least squares
            m = g_tr == g
            w = np.linalg.lstsq(data.X_train[m], data.y_train[m], rcond=None)[0]
            assert np.allclose(w, coefs[g], atol=0.1)
    else:
        assert set(np.unique(data.y_train)) == {0.0, 1.0} and data.task == "binary"
    with pytest.raises(ValueError, match="proportions"):
        ds.make_group_shift(proportions=(0.5, 0.6))
    with pytest.raises(TypeError, match="fixes"):
        ds.load(f"group_shift_{task}", task="regression")


# ------------------------------------------------------------------------ names() and info()
def test_names_cover_every_kind():
    all_names = ds.names()
    assert len(all_names) == len(set(all_names))
    assert ds.names("regression") == ["yacht", "energy", "concrete", "kin8nm", "power"]
    assert set(ds.names("real")) == {"diabetes", "acsincome", "amazon", "iwildcam", "law_school",
                                     "adult", "compas", "mushrooms", "a9a"}
    assert len(ds.names("synthetic")) == 12
    assert ds.names("derived") == ["digits_st", "adult_st", "a9a_st", "mnist_st"]
    assert all_names == (ds.names("regression") + ds.names("real") + ds.names("synthetic")
                         + ds.names("derived"))
    with pytest.raises(ValueError, match="unknown dataset"):
        ds.load("no_such_set")
    with pytest.raises(ValueError, match="protocol"):
        ds.load("adult", protocol="clean")


@pytest.mark.parametrize("name", ds.names())
def test_info_has_the_cli_fields(name):
    i = ds.info(name)
    for key in ("name", "kind", "task", "source", "licence", "rows", "d", "groups", "files",
                "present", "complete"):
        assert key in i, key
    assert i["task"] in ("regression", "binary", "multiclass")
    for f in i["files"]:
        assert f["path"] in ds.FILES and isinstance(f["present"], bool)


@needs_data
def test_info_reports_presence_and_what_is_missing(tmp_path):
    assert ds.info("adult")["present"] and ds.info("adult")["complete"]
    iw = ds.info("iwildcam")
    assert not iw["present"] and not iw["complete"]
    assert iw["missing_upstream"] == ["iwildcam/X_train.npy"]
    assert {f["path"]: f["present"] for f in iw["files"]}["iwildcam/X_test.npy"]
    assert ds.info("amazon")["missing_upstream"] == [
        "amazon/X_test.npy", "amazon/X_train.npy", "amazon/X_val.npy"]
    assert not ds.info("adult", data_home=tmp_path)["present"]
    assert ds.info("yacht", data_home=tmp_path)["present"]       # bundled


@needs_data
def test_info_shapes_agree_with_default_loads(diabetes):
    for name in ("diabetes", "law_school", "adult", "compas", "mushrooms", "a9a"):
        data = diabetes if name == "diabetes" else ds.load(name)
        i = ds.info(name)
        assert (data.n_train, data.n_test, data.n_features) == (i["n_train"], i["n_test"], i["d"])
        assert data.task == i["task"] and set(data.groups_train or {}) == set(i["groups"])


def test_dataset_extension_keeps_regression_sets_working():
    data = ds.load("yacht")
    assert data.X_val is None and data.y_val is None and data.groups_val is None
    assert data.n_test == data.X_test.shape[0] and data.n_features == 6
