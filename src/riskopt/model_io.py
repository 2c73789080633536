"""Model files that cannot run code: the format of ``riskopt fit --out`` and what
``riskopt predict`` / ``riskopt evaluate`` read.

A pickle (or joblib) file is a program: unpickling it may call any function (``os.system``
included) with any argument, so loading a model someone sent you would run their code. The
model files of riskopt are therefore written with `skops.io <https://skops.readthedocs.io>`_,
the scikit-learn ecosystem's format for that purpose: a zip of a JSON schema and ``.npy``
arrays (numpy's ``allow_pickle=False``), rebuilt on load from an explicit list of types.

Loading (:func:`load_model`):

* the types the file would construct are listed first (``skops.io.get_untrusted_types``)
  without building anything; a type outside skops' defaults (numpy, scipy, scikit-learn) and
  riskopt's :data:`TRUSTED_TYPES` (the estimators, risks, losses and the CLI's text
  transform) is **refused** in one line naming those types, unless ``trust=True``
  (``--trust`` on the command line), which you should pass only after reading what they are;
* a pickle / joblib file (any protocol, zlib / gzip / bz2 / xz / lzma compressed) is
  recognised by its first bytes and **never** unpickled: one line says it is code and how to
  go on (refit, or :func:`convert` a file you wrote yourself:
  ``python -m riskopt.model_io convert OLD NEW``);
* anything else (empty, text, a broken zip, a zip that is not a riskopt model, a model of
  another library) is one :class:`ModelFileError` line naming the file;
* the model stores the riskopt, scikit-learn and numpy versions that wrote it; a different
  version on load gives one :class:`ModelVersionWarning` (the model may behave differently).

Files are byte-reproducible: skops names arrays and shared objects after ``id()``, which
changes from run to run; :func:`dumps` renumbers them in order of appearance and gives every
zip entry the same time stamp, so the same fit writes the same bytes.
"""
import io
import json
import re
import warnings
import zipfile
from pathlib import Path

#: the value of the ``"format"`` key of every model dict
FORMAT = "riskopt-model"
#: bumped when the dict's layout changes
FORMAT_VERSION = 1

#: riskopt's own types a model file may build beyond skops' defaults (numpy / scipy /
#: scikit-learn). Anything else (a plug-in risk, a user's function) needs ``trust=True``.
TRUSTED_TYPES = (
    "numpy.dtype",
    "riskopt.estimators.RiskRegressor",
    "riskopt.estimators.RiskClassifier",
    "riskopt.risks.CVaR",
    "riskopt.risks.ESRM",
    "riskopt.risks.Extremile",
    "riskopt.risks.Mean",
    "riskopt.risks.MaxLoss",
    "riskopt.risks.SpectralRisk",
    "riskopt.risks.KLDRO",
    "riskopt.losses.SquaredLoss",
    "riskopt.losses.AbsoluteLoss",
    "riskopt.losses.LogisticLoss",
    "riskopt.losses.MultinomialLoss",
    "riskopt._cli_fit.categories_as_text",
    "riskopt.fairness.FairnessProblem",  # a fit with constraint=... keeps its constraints
)

# first bytes of a pickle / joblib file: protocol 2-5 (0x80 PROTO), joblib's zlib / gzip /
# bz2 / xz / lzma containers, protocol 0/1 opcodes a pickled dict or object starts with
_PICKLE_MAGIC = (b"\x80", b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda", b"\x1f\x8b",
                 b"BZh", b"\xfd7zXZ", b"\x5d\x00\x00", b"ZF")
_PICKLE0 = re.compile(rb"^(?:\((?:dp|lp|i|c|t)|\}q|\]q|\}\(|\](?:\(|q)|c[A-Za-z_][\w.]*\n[\w.]+\n"
                      rb"|(?:[NIFSVL].*\n)?\x2e$)")


class ModelFileError(ValueError):
    """A model file that cannot or must not be loaded (one line: the file, why, the fix)."""


class UntrustedModelError(ModelFileError):
    """A model file that would build types outside the trusted list (``.types`` lists them)."""

    def __init__(self, message, types):
        super().__init__(message)
        self.types = list(types)


class ModelVersionWarning(UserWarning):
    """The model was written by another riskopt / scikit-learn / numpy version."""


def _versions():
    import numpy
    import sklearn

    from . import __version__

    return {"riskopt": __version__, "scikit-learn": sklearn.__version__,
            "numpy": numpy.__version__}


def _renumber(schema):
    """Replace skops' ``id()``-based ``__id__`` values and ``<id>.npy`` file names by
    0, 1, 2, ... in order of appearance (the same id keeps the same number)."""
    ids = {}

    def num(i):
        return ids.setdefault(int(i), len(ids))

    def walk(node):
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "__id__" and isinstance(v, int):
                    out[k] = num(v)
                elif k == "file" and isinstance(v, str) and v.endswith(".npy") \
                        and v[:-4].isdigit():
                    out[k] = f"{num(v[:-4])}.npy"
                else:
                    out[k] = walk(v)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema), ids


def dumps(model):
    """The bytes of a model file for the dict ``model`` (``"estimator"`` and ``"features"``
    at least); the format tag and the library versions are added."""
    import skops.io as sio

    if not isinstance(model, dict) or "estimator" not in model:
        raise TypeError("a riskopt model is a dict with an 'estimator' key")
    model = {**model, "format": FORMAT, "format_version": FORMAT_VERSION,
             "versions": _versions()}
    raw = sio.dumps(model)
    src = zipfile.ZipFile(io.BytesIO(raw))
    schema, ids = _renumber(json.loads(src.read("schema.json")))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        def put(name, data):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            dst.writestr(info, data)

        names = sorted((n for n in src.namelist() if n != "schema.json"),
                       key=lambda n: ids.get(int(n[:-4]), -1) if n[:-4].isdigit() else -1)
        for name in names:
            new = f"{ids[int(name[:-4])]}.npy" if name[:-4].isdigit() else name
            put(new, src.read(name))
        put("schema.json", json.dumps(schema, indent=2))
    return out.getvalue()


def save_model(path, model):
    """Write ``model`` to ``path`` atomically (see :func:`dumps`)."""
    from .bench import _io

    data = dumps(model)
    _io.atomic_write(path, lambda fh: fh.write(data), make_parents=False)


def _looks_like_pickle(head):
    return head.startswith(_PICKLE_MAGIC) or _PICKLE0.match(head) is not None


def untrusted_types(data):
    """The types the model file bytes ``data`` would build that are not trusted by default
    (neither skops' defaults nor :data:`TRUSTED_TYPES`)."""
    import skops.io as sio

    return [t for t in sio.get_untrusted_types(data=data) if t not in TRUSTED_TYPES]


def _read(path):
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelFileError(f"model file {path} is a folder; give the file written by "
                             "`riskopt fit`")
    try:
        return path.read_bytes()
    except OSError as exc:
        from .bench._io import describe_os_error

        exc.filename = str(path)
        raise ModelFileError(describe_os_error(exc, "cannot read")) from None


def _one_line(exc):
    """An exception's message on one line, at most 160 characters (or its type's name)."""
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def loads(data, trust=False, where="model file"):
    """The model dict in the bytes ``data`` (see :func:`load_model`)."""
    import skops.io as sio

    head = bytes(data[:256])
    if not head:
        raise ModelFileError(f"{where} is empty; give a file written by `riskopt fit`")
    if not head.startswith(b"PK\x03\x04"):
        if _looks_like_pickle(head):
            raise ModelFileError(
                f"{where} is a pickle/joblib file: loading it would run any code it contains, "
                "so riskopt does not open it; refit the model with `riskopt fit` (which writes "
                "a safe skops file), or if you wrote this file yourself convert it with "
                "`python -m riskopt.model_io convert OLD NEW`")
        raise ModelFileError(f"{where} is not a riskopt model file (not a skops zip file); "
                             "give a file written by `riskopt fit`")
    try:
        bad = untrusted_types(data)
    except Exception as exc:  # a broken zip, no schema.json, a schema of another version
        raise ModelFileError(f"{where} is not a readable riskopt model file ({_one_line(exc)}); "
                             "give a file written by `riskopt fit`") from None
    if bad and not trust:
        raise UntrustedModelError(
            f"{where} would build types riskopt does not trust: {', '.join(bad)}; loading "
            "them may run their code. If you know what they are, pass --trust "
            "(trust=True) to load it anyway", bad)
    try:
        model = sio.loads(data, trusted=list(TRUSTED_TYPES) + bad)
    except Exception as exc:
        raise ModelFileError(f"{where} cannot be loaded ({_one_line(exc)}); give a file "
                             "written by `riskopt fit`") from None
    if not isinstance(model, dict) or model.get("format") != FORMAT:
        what = type(model).__name__ if not isinstance(model, dict) else "a dict without " \
            "riskopt's format tag"
        raise ModelFileError(f"{where} holds {what}, not a riskopt model; give a file written "
                             "by `riskopt fit`")
    for key in ("estimator", "features"):
        if key not in model:
            raise ModelFileError(f"{where} is a riskopt model without its {key!r} entry (a "
                                 "damaged or hand-made file); refit it with `riskopt fit`")
    if not hasattr(model["estimator"], "predict"):
        raise ModelFileError(f"{where}: its estimator ({type(model['estimator']).__name__}) "
                             "has no predict method; refit it with `riskopt fit`")
    saved, now = model.get("versions") or {}, _versions()
    diff = [f"{k} {saved.get(k, '?')} (now {v})" for k, v in now.items() if saved.get(k) != v]
    if diff:
        warnings.warn(f"{where} was written with {', '.join(diff)}; its predictions may differ "
                      "from that version's: refit it to be sure", ModelVersionWarning,
                      stacklevel=3)
    return model


def load_model(path, trust=False):
    """The model dict saved by ``riskopt fit`` at ``path``.

    Raises :class:`ModelFileError` (one line naming the file and the fix) for a missing,
    empty, damaged or foreign file and for a pickle / joblib file (never unpickled), and
    :class:`UntrustedModelError` when the file would build types outside the trusted list and
    ``trust`` is false. Warns :class:`ModelVersionWarning` when it was written by other
    library versions.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from riskopt import RiskRegressor
    >>> from riskopt.model_io import save_model, load_model
    >>> X, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    >>> est = RiskRegressor(risk="mean").fit(X, y)
    >>> path = os.path.join(tempfile.mkdtemp(), "m.skops")
    >>> save_model(path, {"estimator": est, "features": ["a", "b"]})
    >>> bool(np.allclose(load_model(path)["estimator"].predict(X), est.predict(X)))
    True
    """
    return loads(_read(path), trust=trust, where=str(path))


def convert(old, new):
    """Rewrite a pickle / joblib model file ``old`` (written by an older ``riskopt fit``) as a
    safe model file ``new``. This unpickles ``old``, which runs any code it contains: use it
    only on a file you wrote yourself."""
    import joblib

    model = joblib.load(old)
    if not isinstance(model, dict) or "estimator" not in model:
        raise ModelFileError(f"{old} does not hold a riskopt model dict")
    save_model(new, model)
    return new


def describe(path):
    """``[(key, value)]`` of a model file: its format, the library versions that wrote it and
    what ``riskopt fit`` stored (task, target, risk, features, ...). Loads it like
    :func:`load_model` (trusted types only), without the version warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelVersionWarning)
        model = load_model(path)
    saved = model.get("versions") or {}
    rows = [("format", f"{model.get('format')} {model.get('format_version', '?')}")]
    rows += [(f"written with {k}", f"{saved.get(k, '?')} (now {v})") for k, v in
             _versions().items()]
    feats = list(model.get("features") or [])
    for key in ("task", "target", "risk", "group", "constraint", "sensitive"):
        if model.get(key) is not None:
            rows.append((key, str(model[key])))
    rows.append(("features", f"{len(feats)}: {', '.join(map(str, feats[:10]))}"
                             f"{', ...' if len(feats) > 10 else ''}"))
    est = model["estimator"]
    final = est.steps[-1][1] if hasattr(est, "steps") else est
    rows.append(("estimator", f"{type(final).__name__}, solver "
                              f"{getattr(final, 'solver_', '?')}"))
    return rows


def _main(argv=None):
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="python -m riskopt.model_io",
        description="Describe a model file written by 'riskopt fit' (info), or convert a "
                    "pickle/joblib model file of an older 'riskopt fit' to the safe skops "
                    "format (convert: this UNPICKLES the old file, which runs any code it "
                    "contains: only for files you wrote yourself).")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("info", help="MODEL: the versions that wrote it, task, target, risk, "
                       "features")
    i.add_argument("model")
    c = sub.add_parser("convert", help="OLD (pickle/joblib) -> NEW (skops)")
    c.add_argument("old")
    c.add_argument("new")
    args = p.parse_args(argv)
    try:
        if args.cmd == "info":
            for key, value in describe(args.model):
                print(f"{key}: {value}")
            return 0
        convert(args.old, args.new)
    except Exception as exc:
        print(f"riskopt: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(f"model: {args.new}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
