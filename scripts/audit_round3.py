"""Issue 30's kinds of silent / unsafe behaviour, one probe each, run against any tree.

    PYTHONPATH=<tree>/src python scripts/audit_round3.py [--only KIND ...] [--json FILE]

Each probe prints one line ``kind | case | outcome``; the outcome says what happened (a clear
error with exit 2, a warning, a correct result, or SILENT / UNCLEAR / EXECUTED). Run it with
the tree before a change (``git archive 6a37f815 src | tar -x -C /tmp/base``) and after to
get the before/after table of the closing note. Everything runs in a temporary folder; the
"malicious" model file only creates a marker file there (to detect that code ran).
"""
import argparse
import contextlib
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

ROWS = []


def row(kind, case, outcome):
    ROWS.append({"kind": kind, "case": case, "outcome": outcome})
    print(f"{kind} | {case} | {outcome}", flush=True)


def cli(*argv, cwd=None):
    """``riskopt ARGV`` in a subprocess: (exit status, last stderr line, #stderr lines)."""
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    p = subprocess.run([sys.executable, "-m", "riskopt.cli", *map(str, argv)], cwd=cwd,
                       capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    return p.returncode, (lines[-1] if lines else ""), len(lines), p.stdout


def judge_cli(rc, last, n):
    if rc == 2 and n <= 2:
        return f"clear error (exit 2): {last[:110]}"
    if rc == 0:
        return f"exit 0 ({last[:80]})"
    return f"UNCLEAR (exit {rc}, {n} stderr lines): {last[:90]}"


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# ---------------------------------------------------------------------------- kinds
def kind_model(tmp):
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=60), "b": rng.normal(size=60)})
    df["y"] = df["a"] - df["b"] + 0.1 * rng.normal(size=60)
    data = tmp / "d.csv"
    df.to_csv(data, index=False)
    model = tmp / "m.model"
    rc, last, n, _ = cli("fit", data, "--target", "y", "--quiet", "--out", model)
    head = model.read_bytes()[:4] if model.exists() else b""
    row("model", "format riskopt fit writes",
        "skops zip (no code)" if head == b"PK\x03\x04" else f"pickle/joblib ({head!r})")
    marker = tmp / "EXECUTED"
    import joblib

    for name, dump in (("joblib", lambda p: joblib.dump({"estimator": Evil(marker)}, p)),
                       ("pickle", lambda p: p.write_bytes(pickle.dumps(Evil(marker))))):
        evil = tmp / f"evil.{name}"
        dump(evil)
        for cmd in ("predict", "evaluate"):
            rc, last, n, _ = cli(cmd, evil, data)
            ran = marker.exists()
            marker.unlink(missing_ok=True)
            row("model", f"{cmd} on a {name} file whose unpickling runs os.system",
                ("EXECUTED the command; " if ran else "not executed; ") + judge_cli(rc, last, n))
    # a model holding something else
    for what, obj in (("a list", [1, 2]), ("a dict without estimator", {"features": ["a"]})):
        path = tmp / "other.joblib"
        joblib.dump(obj, path)
        rc, last, n, _ = cli("predict", path, data)
        row("model", f"predict on a joblib file holding {what}", judge_cli(rc, last, n))
    try:
        from riskopt import model_io

        saved = model_io.load_model(model)
        row("model", "versions stored in the model", str(saved.get("versions")))
    except Exception:
        row("model", "versions stored in the model", "NONE (no version in the file)")
    rc, last, n, out = cli("predict", "--help")
    row("model", "predict --help says a model file is (not) code",
        "yes" if "not code" in out or "--trust" in out else "NO")


def kind_spec(tmp):
    spec = ('name = "{name}"\ndatasets = ["yacht"]\nseeds = [0]\npasses = 2\nlr = [0.01]\n'
            'objectives = ["cvar:0.5"]\nsolvers = ["sgd"]\n[plot]\nx = ["passes"]\n')
    for name in ("..", ".", "a/b", "/tmp/x", ".hidden"):
        cwd = tmp / f"cwd{abs(hash(name)) % 1000}"
        (cwd / "results").mkdir(parents=True)
        f = cwd / "s.toml"
        f.write_text(spec.format(name=name))
        rc, last, n, _ = cli("bench", "run", f, "--jobs", "1", "--no-plot", "-q", cwd=cwd)
        outside = sorted(p.name for p in cwd.iterdir() if p.name not in ("results", "s.toml"))
        top = sorted(p.name for p in (cwd / "results").iterdir() if p.is_file())
        esc = f"WROTE {outside} in the working dir" if outside else (
            f"WROTE {top} into results/" if top else "nothing outside")
        row("spec", f"spec named {name!r}", f"{esc}; {judge_cli(rc, last, n)}")
    cwd = tmp / "utf"
    cwd.mkdir()
    bad = cwd / "latin1.toml"
    bad.write_bytes(spec.format(name="caf\xe9").encode("latin-1"))
    rc, last, n, _ = cli("bench", "run", bad, "--dry-run", cwd=cwd)
    row("spec", "non-UTF-8 spec file", judge_cli(rc, last, n))


def kind_fstar(tmp):
    """A hand-edited fstar.json: is the edit used (an f* that does not belong to the cells)?"""
    spec = ('name = "fs"\ndatasets = ["yacht"]\nseeds = [0]\npasses = 2\nlr = [0.01]\n'
            'objectives = ["cvar:0.5"]\nsolvers = ["sgd"]\n[plot]\nx = ["passes"]\n')
    cwd = tmp / "fs"
    cwd.mkdir()
    f = cwd / "s.toml"
    f.write_text(spec)
    out = cwd / "out"
    cli("bench", "run", f, "--out", out, "--jobs", "1", "--no-plot", "-q", cwd=cwd)
    fs = json.loads((out / "fstar.json").read_text())
    orig = {k: v["f_star"] for k, v in fs.items()}
    for v in fs.values():
        v["f_star"] = v["f_star"] - 1.0
    (out / "fstar.json").write_text(json.dumps(fs))
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    p = subprocess.run([sys.executable, "-m", "riskopt.cli", "bench", "run", str(f), "--out",
                        str(out), "--jobs", "1", "--no-plot", "-q"], cwd=cwd,
                       capture_output=True, text=True, env=env, timeout=900)
    import pandas as pd

    t = pd.read_parquet(out / "results.parquet")
    ref = float(next(iter(orig.values())))
    used = float(t["f_star_ref"].iloc[0])
    warned = [ln for ln in p.stderr.splitlines() if "fstar.json" in ln and "warning" in ln]
    row("spec", "hand-edited fstar.json (f* - 1), rerun",
        (f"USED the edited f* ({used:.6g} instead of {ref:.6g})" if used != ref else
         f"edit detected, f* recomputed ({used:.6g})")
        + (f"; warning: {warned[0][:120]}" if warned else "; NO warning")
        + f"; exit {p.returncode}")


def _run_flag(solver, obj, epochs):
    import riskopt as ro

    f0 = float(obj.value(obj.zeros()))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = solver.run(obj, epochs)
    div = [x for x in w if type(x.message).__name__ == "DivergenceWarning"]
    ratio = res.value / f0 if np.isfinite(res.value) else float("inf")
    flag = "flagged (DivergenceWarning)" if res.diverged and div else (
        "flagged, no warning" if res.diverged else "NOT flagged")
    del ro
    return f"F_end / F(0) = {ratio:.3g}; {flag}"


def kind_divergence(tmp):
    import riskopt as ro
    from riskopt.objectives.fcco import ConstrainedObjective, GroupRiskObjective

    rng = np.random.default_rng(0)
    n, d, m = 2000, 10, 10
    X = rng.normal(size=(n, d))
    g = rng.integers(0, m, n)
    y = X @ rng.normal(size=d) + g * 0.3 + rng.normal(size=n)
    obj = GroupRiskObjective("squared", "cvar:0.3", X, y, g, l2_reg=1e-3)
    yc = (y > np.median(y)).astype(float)
    con = ConstrainedObjective("logistic", X, yc, [(g == 0, 0.3), (g == 1, 0.3)], rho=10.0,
                               l2_reg=1e-3)
    ob2 = ro.Objective("squared", ro.CVaR(0.5, shift_cost=1.0), X, y, l2_reg=1e-3)
    for name, lr, o, what in (("sonx", 3.0, obj, "group DRO"), ("sonex", 3.0, obj, "group DRO"),
                              ("alexr2", 10.0, obj, "group DRO"),
                              ("sonex", 3.0, con, "a constrained problem"),
                              ("alexr2", 30.0, con, "a constrained problem"),
                              ("sonx", 1.0, obj, "group DRO (a sane step)"),
                              ("sgd", 0.1, ob2, "spectral CVaR (a sane step)")):
        row("divergence", f"{name.upper()} lr={lr:g} on {what}",
            _run_flag(ro.solvers.get(name, lr=lr, random_state=0), o, 20))


def kind_torch_divergence(tmp):
    # the torch optimizers judged against their start (the cases of the common table's
    # test_the_issues_rising_runs_are_flagged, through its driver)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import test_torch_optim_common as table

    for case in [("sonx", 1.0, "group", 120, 1.7), ("alexr2", 10.0, "group", 40, 1.0),
                 ("sonex", 10.0, "constrained", 40, 1.0), ("sonx", 0.1, "group", 120, 1.7),
                 ("alexr2", 0.1, "group", 40, 1.0), ("sonex", 1.0, "constrained", 40, 1.0)]:
        ratio, caught = table._fcco_run(*case)
        what = "group DRO" if case[2] == "group" else "a constrained problem"
        row("torch divergence", f"torch {case[0].upper()} lr={case[1]:g} on {what}",
            f"F_end / F(0) = {ratio:.3g}; " + ("flagged (DivergenceWarning: "
                                               f"{str(caught[0].message)[:60]}...)"
                                               if caught else "NOT flagged"))


def kind_degenerate(tmp):
    import riskopt as ro

    for a in (1e-17, 1e-300, 5e-324):
        try:
            with np.errstate(all="ignore"):
                v = ro.CVaR(a).value(np.arange(10.0))
            row("degenerate", f"CVaR({a:g}).value(0..9)",
                "9 (exact max)" if v == 9 else f"SILENT {v}")
        except ValueError as exc:
            row("degenerate", f"CVaR({a:g}).value(0..9)", f"clear error: {str(exc)[:80]}")
    X = np.random.default_rng(0).normal(size=(50, 3))
    y = X @ np.ones(3)
    try:
        with np.errstate(all="ignore"):
            o = ro.Objective("squared", ro.CVaR(1e-17), X, y)
            v = o.value(np.ones(3) * 0.5)
        ref = float(np.max(0.5 * (X @ np.ones(3) * 0.5 - y) ** 2))
        row("degenerate", "Objective(CVaR(1e-17)).value",
            "max loss (exact)" if np.isclose(v, ref) else f"SILENT {v} (max {ref:.4g})")
    except ValueError as exc:
        row("degenerate", "Objective(CVaR(1e-17)).value", f"clear error: {str(exc)[:80]}")
    import pandas as pd

    df = pd.DataFrame(X, columns=list("abc"))
    df["y"] = y
    path = tmp / "deg.csv"
    df.to_csv(path, index=False)
    rc, last, n, out = cli("fit", path, "--target", "y", "--risk", "cvar:1e-300", "--quiet",
                           "--out", tmp / "deg.model")
    obj_line = next((ln for ln in out.splitlines() if ln.startswith("objective")), "")
    row("degenerate", "riskopt fit --risk cvar:1e-300",
        f"exit {rc}; {obj_line[:60]}" + (" (SILENT NaN)" if "nan" in obj_line else ""))
    for c in (1e150,):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = ro.RiskRegressor(risk="kl:0.5").fit(X, y * c)
            w = est.coef_ / c
            ok = np.allclose(w, np.ones(3), atol=1e-3)
            row("degenerate", f"KL fit with y x {c:g}",
                "the scaled model (correct)" if ok else
                f"SILENT wrong model coef/c = {np.round(w, 4)}")
        except ValueError as exc:
            row("degenerate", f"KL fit with y x {c:g}", f"clear error: {str(exc)[:80]}")


def kind_errors(tmp):
    import pandas as pd

    import riskopt as ro

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=40), "u": pd.Categorical(rng.choice(["u", "v"], 40))})
    y = rng.normal(size=40)
    for what, frame in (("Categorical column", df),
                        ("string column", df.assign(u=df["u"].astype(str)))):
        try:
            ro.RiskRegressor().fit(frame, y)
            row("errors", f"RiskRegressor.fit on a DataFrame with a {what}", "SILENT fit")
        except Exception as exc:
            msg = str(exc)
            named = "'u'" in msg and ("encode" in msg or "one-hot" in msg)
            row("errors", f"RiskRegressor.fit on a DataFrame with a {what}",
                ("clear: " if named else "UNCLEAR: ") + msg[:100])
    tab = pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(size=40)})
    tab["y"] = tab["a"] + 0.1
    train = tmp / "t.csv"
    tab.to_csv(train, index=False)
    model = tmp / "e.model"
    cli("fit", train, "--target", "y", "--quiet", "--out", model)
    bad = tab.astype(object)
    bad.loc[3, "a"] = "abc"
    badp = tmp / "bad.csv"
    bad.to_csv(badp, index=False)
    rc, last, n, _ = cli("predict", model, badp)
    row("errors", "predict on a CSV with 'abc' in a numeric column", judge_cli(rc, last, n))
    rc, last, n, _ = cli("evaluate", model, badp)
    row("errors", "evaluate on a CSV with 'abc' in a numeric column", judge_cli(rc, last, n))


KINDS = {"model": kind_model, "spec": kind_spec, "fstar": kind_fstar, "divergence": kind_divergence,
         "torch_divergence": kind_torch_divergence,
         "degenerate": kind_degenerate, "errors": kind_errors}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=list(KINDS))
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for k in args.only or KINDS:
            try:
                KINDS[k](Path(d))
            except Exception as exc:  # the probe itself failed: say so, go on
                row(k, "probe", f"PROBE FAILED: {type(exc).__name__}: {str(exc)[:100]}")
    if args.json:
        Path(args.json).write_text(json.dumps(ROWS, indent=1))


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()) if False else contextlib.nullcontext():
        main()
