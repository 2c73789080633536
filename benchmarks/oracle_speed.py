"""The exact spectral-risk oracle against ``np.sort`` of the same loss vector.

    python benchmarks/oracle_speed.py [--n 1000000] [--repeats 7] [--note TEXT]
                                      [--base-src DIR] [--out benchmarks/results/oracle_speed]

Every spectrum of issue 31 (CVaR 0.5, ESRM 1, extremile 2, a user spectrum = a cubic ramp plus
a top-decile step, as ``prospect_incremental.py``) without and with a chi2 / KL shift cost
0.5, plus the ``nu = 0`` selection rows (CVaR 0.1 / 0.3, Mean, MaxLoss), on continuous losses
(squared Gaussian residuals) and on the same rounded to 2 decimals (many ties). Each timed
against ``np.sort(losses)`` (medians over ``--repeats`` calls, all in one process, the
calls of a row interleaved with ``np.sort`` of the same vector, so the ratios compare even
on a loaded machine, in a random order each round (from stop 43: no column is always the
one after ``np.sort``); CPU time of the process, ``time.process_time``):

* sorting oracle: ``oracles.risk_weights``: on heavily tied losses (a sample predicts at most
  n / 4 values) ``oracle_ties`` (``np.sort`` of the values, the PAV on the distinct values, a
  bucket table back to the losses), else ``oracles.sorted_order`` (one ``np.sort`` of 64-bit
  keys = value bits with the index in the low bits, near-equal runs fixed in place) and the
  fused PAV / scatter / value of ``oracles._risk_weights_gathered``;
* the objective path (``Objective.risk_weights``, what the solvers and L-BFGS call, and
  ``risk.weights``, asserted equal): ``oracles.spectral_risk_weights``, i.e. the selection
  oracle (``np.partition``, one pass, no sort) for ``nu = 0`` and a spectrum constant below
  one rank and above another (CVaR, Mean, MaxLoss), the box oracle by selection
  (``oracle_select.box_select_weights``) for CVaR / MaxLoss with a shift cost, else the
  sorting oracle. ``path`` says which;
* with ``--base-src DIR`` (the ``src`` of another checkout, e.g. ``git worktree add /tmp/base
  fc0aa21c``): that checkout's ``_kernels/oracles.py`` and ``oracle_select.py`` loaded side by
  side as a separate package, its ``spectral_risk_weights`` timed in the same process
  ("before").

The last columns: the largest difference of the weights against the stable merge-sort
oracle (``oracles._risk_weights``: numba's merge argsort + the log-form PAV) and against
"before", and of the values relative to ``max(1, |value|)`` (asserted within ``8 n eps`` of
the values and the spread). A second table times the sort alone: ``np.sort``, ``np.argsort``,
``oracles.sorted_order`` (the stable argsort), before's ``sorted_order``, and an LSD radix
argsort in numba (:func:`radix_argsort`, 16-bit digits, constant digits skipped) for
comparison. Writes ``results.md`` and ``results.json`` (every row) and ``metadata.json``.
"""
import argparse
import importlib
import inspect
import os
import platform
import sys
import time
import types

import numpy as np
from numba import njit

import riskopt as ro
from riskopt._kernels import oracle_select as ks
from riskopt._kernels import oracles as ko
from riskopt._kernels import sort_keys as sk
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prospect_incremental import user_spectrum  # noqa: E402

EPS = np.finfo(float).eps


def round_orders(m, repeats, seed=0):
    """The order of the ``m`` calls in each of ``repeats`` rounds: a fresh random permutation
    per round (seeded, so a run repeats its schedule). Stop 42 (notes/stop42/i28.md) saw the
    column timed right after ``np.sort`` in a fixed order read unchanged code 3-10 % apart
    from the same code in another column; here no call is systematically second, nor
    systematically after the same call."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(m) for _ in range(repeats)]


def interleaved_medians(fs, repeats):
    """Median CPU time of each callable in ``fs`` (None: NaN), the calls interleaved (one
    of each per round, in an order drawn afresh each round: :func:`round_orders`), so a
    burst of load on a shared machine hits all of them alike and none always runs in the
    same place."""
    live = [f for f in fs if f is not None]
    for f in live:
        f()
    ts = [[] for _ in live]
    for order in round_orders(len(live), repeats):
        for j in order:
            f = live[j]
            t0 = time.process_time()
            f()
            ts[j].append(time.process_time() - t0)
    med = iter([float(np.median(t)) for t in ts])
    return [next(med) if f is not None else float("nan") for f in fs]


def load_base(src):
    """``_kernels.oracles`` of the checkout at ``src`` as a separate package (its relative
    imports resolve inside it; the package's ``__init__`` is not run)."""
    pkg = types.ModuleType("_base_kernels")
    pkg.__path__ = [os.path.join(src, "riskopt", "_kernels")]
    sys.modules["_base_kernels"] = pkg
    return importlib.import_module("_base_kernels.oracles")


@njit(cache=True)
def _radix_pass(src_k, src_i, dst_k, dst_i, shift, count):
    for j in range(src_k.shape[0]):
        d = np.int64((src_k[j] >> np.uint64(shift)) & np.uint64(0xFFFF))
        p = count[d]
        dst_k[p] = src_k[j]
        dst_i[p] = src_i[j]
        count[d] = p + 1


@njit(cache=True)
def _radix_argsort(bits):
    """LSD radix argsort of the order-preserving keys (``sort_keys._key``) of float64 bits:
    four passes of 16-bit digits over (key, index) pairs, one histogram pass for all four,
    and a pass skipped when its digit is the same for every key."""
    n = bits.shape[0]
    sign = np.uint64(1) << np.uint64(63)
    k0 = np.empty(n, dtype=np.uint64)
    i0 = np.empty(n, dtype=np.int64)
    hist = np.zeros((4, 65536), dtype=np.int64)
    for j in range(n):
        k = sk._key(bits[j], sign)
        k0[j] = k
        i0[j] = j
        for p in range(4):
            hist[p, np.int64((k >> np.uint64(16 * p)) & np.uint64(0xFFFF))] += 1
    k1 = np.empty(n, dtype=np.uint64)
    i1 = np.empty(n, dtype=np.int64)
    for p in range(4):
        h = hist[p]
        if h.max() == n:
            continue
        count = np.empty(65536, dtype=np.int64)
        acc = 0
        for d in range(65536):
            count[d] = acc
            acc += h[d]
        _radix_pass(k0, i0, k1, i1, 16 * p, count)
        k0, k1 = k1, k0
        i0, i1 = i1, i0
    return i0


def radix_argsort(losses):
    """The stable argsort by an LSD radix sort (see ``_radix_argsort``)."""
    return _radix_argsort(np.ascontiguousarray(losses, dtype=np.float64).view(np.uint64))


def sort_path(losses, sigma, nu, div):
    """Which branch of ``oracles.risk_weights`` runs."""
    if losses.shape[0] >= ko.TIES_MIN_N and ko.few_values(losses, losses.view(np.uint64),
                                                          ko.TIES_MAX_GROUPS):
        if ko.tied_risk_weights(losses, sigma, nu, div, np.empty(losses.shape[0])) is not None:
            return "sort (tied values)"
    return "argsort"


def path_of(losses, sigma, nu, div):
    plan = ko.selection_plan(sigma)
    if nu > 0:
        q = np.empty(losses.shape[0])
        if ks.box_select_weights(losses, sigma, plan, nu, div, q) is not None:
            return "box selection"
        declined = "" if ks.box_of(sigma, plan) is None else " (box declined)"
        return sort_path(losses, sigma, nu, div) + declined
    if plan is None:
        return sort_path(losses, sigma, nu, div)
    if plan.k_hi == plan.k_lo:
        return "selection"
    return f"selection ({plan.k_hi - plan.k_lo + 1:,} ranks sorted)"


def risks_of(n):
    out = [ro.CVaR(0.1), ro.CVaR(0.3), ro.Mean(), ro.MaxLoss()]
    for kw in ({}, dict(shift_cost=0.5, divergence="chi2"), dict(shift_cost=0.5, divergence="kl")):
        out += [ro.CVaR(0.5, **kw), ro.ESRM(1.0, **kw), ro.Extremile(2.0, **kw),
                ro.SpectralRisk(user_spectrum(n), **kw)]
    return out


def name_of(risk):
    if isinstance(risk, ro.SpectralRisk) and type(risk).__name__ == "SpectralRisk":
        cost = "" if float(risk.shift_cost) == 0 else f", {risk.divergence} {risk.shift_cost:g}"
        return f"user (cubic ramp + top-decile step{cost})"
    return repr(risk)


def torch_rows(n, rng, repeats, base):
    """Issue 28's rows: the oracle that ``SpectralRiskLoss`` calls on a CPU batch
    (``oracles.spectral_risk_weights``) for ESRM(1, chi2 1) and Extremile(2, KL 0.1), on
    float64 losses and on a float32 batch as the loss hands it over (the float64 copy
    included), in microseconds, before / after, against ``np.sort`` of the float64
    vector. After stop 42 the loss reads a float32 batch in place
    (``oracle_batch.batch_risk_weights_f32``: no copy), so "after" times that call on the
    float32 row."""
    from riskopt._kernels import oracle_batch as kb
    z = rng.standard_normal(n)
    l64 = z ** 2
    l32 = l64.astype(np.float32)
    # before with radix=True too where its code has it (as the loss calls it)
    kw_b = ({"radix": True} if base and "radix" in
            inspect.signature(base.spectral_risk_weights).parameters else {})
    out = ["", f"Issue 28's torch-loss oracle rows (``spectral_risk_weights``), n = {n:,}, "
           "us (ratio to np.sort of the float64 vector):", "",
           "| risk | input | np.sort us | before us (ratio) | after us (ratio) |",
           "|---|---|---:|---:|---:|"]
    for risk in (ro.ESRM(1.0, shift_cost=1.0), ro.Extremile(2.0, shift_cost=0.1,
                                                             divergence="kl")):
        nu, div = float(risk.shift_cost), risk.div_code
        sigma = np.ascontiguousarray(risk.spectrum(n))
        plan = ko.selection_plan(sigma)
        plan_b = base.selection_plan(sigma) if base else None
        q, q_b = np.empty(n), np.empty(n)
        for name, x in (("float64", l64), ("float32", l32)):
            def conv(x=x):
                return np.ascontiguousarray(x, dtype=np.float64)
            in_place = (x.dtype == np.float32 and n <= kb.sort_keys.RADIX_MAX
                        and ks.box_of(sigma, plan) is None)
            if in_place:  # (the loss's call: the copy's value and weights bit for bit)
                q2 = np.empty(n)
                v_ref = ko.spectral_risk_weights(conv(), sigma, nu, div, q2, plan, radix=True)
                assert kb.batch_risk_weights_f32(x, sigma, nu, div, q) == v_ref
                assert np.array_equal(q, q2)
            t_sort, t_base, t_new = interleaved_medians(
                [lambda: np.sort(l64),
                 (lambda: base.spectral_risk_weights(conv(), sigma, nu, div, q_b, plan_b,
                                                     **kw_b))
                 if base else None,
                 (lambda: kb.batch_risk_weights_f32(x, sigma, nu, div, q)) if in_place else
                 lambda: ko.spectral_risk_weights(conv(), sigma, nu, div, q, plan, radix=True)],
                max(repeats, 101) if n <= 1 << 16 else repeats)
            cell = [("-" if t != t else f"{t * 1e6:.1f} ({t / t_sort:.2f}x)")
                    for t in (t_base, t_new)]
            out.append(f"| {name_of(risk)} | {name} | {t_sort * 1e6:.1f} | {cell[0]} | "
                       f"{cell[1]} |")
            print(out[-1], flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "oracle_speed"))
    ap.add_argument("--base-src", default=None,
                    help="src of another checkout: its oracle timed side by side (before)")
    ap.add_argument("--note", default="", help="a sentence for results.md (e.g. the load)")
    args = ap.parse_args()
    t_start = time.time()
    base = load_base(args.base_src) if args.base_src else None
    rng = np.random.default_rng(0)
    n = args.n
    cont = rng.standard_normal(n) ** 2
    data = {"continuous": cont, "ties (2 decimals)": np.round(cont, 2)}
    risks = risks_of(n)
    X0, y0 = np.zeros((n, 1)), np.zeros(n)
    lines = [f"# Exact oracle vs np.sort, n = {n:,}", "",
             f"Medians over {args.repeats} calls (CPU time of the process). Ratio = time / "
             "np.sort time of the same vector. All columns of a row, and all rows, are "
             "measured in the same process, so the ratios stay comparable when the machine is "
             "loaded (absolute times are noisy then); the calls of a row run in a random "
             "order each round. Issue 31 asks for <= 3x np.sort."
             + (f" Before = {args.base_src} (loaded side by side)." if base else "")
             + (f" {args.note}" if args.note else ""), "",
             "| losses | risk | np.sort ms | before ms (ratio) | objective path ms (ratio) | "
             "path | max abs diff of q vs merge sort | vs before | value diff (rel.) |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    rows = []
    for dname, l in data.items():
        for risk in risks:
            nu, div = float(risk.shift_cost), risk.div_code
            sigma = np.ascontiguousarray(risk.spectrum(n))
            obj = ro.Objective("squared", risk, X0, y0)
            plan_b, q_b = (base.selection_plan(sigma), np.empty(n)) if base else (None, None)
            t_sort, t_base, t_obj = interleaved_medians(
                [lambda: np.sort(l),
                 (lambda: base.spectral_risk_weights(l, sigma, nu, div, q_b, plan_b))
                 if base else None,
                 lambda: obj.risk_weights(l)], args.repeats)
            v_obj, q_obj = obj.risk_weights(l)
            np.testing.assert_array_equal(risk.weights(l), q_obj)
            q_ms = np.empty(n)
            v_ms = ko._risk_weights(l, sigma, nu, div, q_ms)
            vdiff = abs(v_ms - v_obj) / max(1.0, abs(v_ms))
            assert abs(v_ms - v_obj) <= 8 * n * EPS * (abs(v_ms) + float(np.ptp(l)))
            diff = float(np.max(np.abs(q_ms - q_obj)))
            diff_base = float("nan")
            if base is not None:
                base.spectral_risk_weights(l, sigma, nu, div, q_b, plan_b)
                diff_base = float(np.max(np.abs(q_b - q_obj)))
            path = path_of(l, sigma, nu, div)

            def cell(t):
                return "-" if t != t else f"{t * 1e3:.2f} ({t / t_sort:.2f}x)"

            lines.append(f"| {dname} | {name_of(risk)} | {t_sort * 1e3:.2f} | "
                         f"{cell(t_base)} | {cell(t_obj)} | {path} | "
                         f"{diff:.1e} | {diff_base:.1e} | {vdiff:.1e} |")
            rows.append(dict(losses=dname, risk=name_of(risk), sort_ms=t_sort * 1e3,
                             before_ms=t_base * 1e3, objective_ms=t_obj * 1e3,
                             before_ratio=t_base / t_sort, ratio=t_obj / t_sort, path=path,
                             max_abs_diff_q=diff, max_abs_diff_q_before=diff_base,
                             value_diff_rel=vdiff))
            print(lines[-1], flush=True)
    for key, label in (("ratio", "the objective path"), ("before_ratio", "before")):
        if any(r[key] == r[key] for r in rows):
            worst = max(rows, key=lambda r: r[key])
            lines += ["", f"Largest ratio of {label}: {worst[key]:.2f}x "
                      f"({worst['losses']}, {worst['risk']}); rows over 3x: "
                      f"{sum(r[key] > 3 for r in rows)} of {len(rows)}."]
    lines += torch_rows(n, rng, args.repeats, base)
    lines += ["", "Sorting alone (the permutation the sorting oracle needs), ms (ratio to "
              "np.sort):", "", "| losses | np.sort | np.argsort | oracles.sorted_order "
              "(= the stable argsort; radix=True) | before's sorted_order | "
              "LSD radix argsort (numba) |",
              "|---|---:|---:|---:|---:|---:|"]
    for dname, l in data.items():
        fs = [lambda: np.sort(l), lambda: np.argsort(l), lambda: ko.sorted_order(l, radix=True),
              (lambda: base.sorted_order(l)) if base else None, lambda: radix_argsort(l)]
        ts = interleaved_medians(fs, args.repeats)
        stable = np.argsort(l, kind="stable")
        np.testing.assert_array_equal(ko.sorted_order(l, radix=True)[0], stable)
        np.testing.assert_array_equal(radix_argsort(l), stable)
        lines.append(f"| {dname} | " + " | ".join(
            "-" if t != t else f"{t * 1e3:.2f} ({t / ts[0]:.2f}x)" for t in ts) + " |")
        print(lines[-1], flush=True)
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")
    atomic_write_json(os.path.join(args.out, "results.json"), rows)
    atomic_write_json(os.path.join(args.out, "metadata.json"), {
        "script": "benchmarks/oracle_speed.py", "n": n, "repeats": args.repeats,
        "base_src": args.base_src, "git_commit": _git_commit(),
        "machine": platform.platform(), "cpus": os.cpu_count(), "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "note": args.note,
        "wall_seconds": round(time.time() - t_start, 1)})
    print(f"wrote {args.out}/results.md")


if __name__ == "__main__":
    main()
