"""How long SCDRO's stalls last (stop 43, task kl): the evidence for ``stall_steps``.

A *stall* is a step whose batch weights ``exp(l / lambda - log s) / b`` all underflow (their
sum below the losses' smallest normal number): the surrogate's gradient is zero and the
model does not move. Stop 42 reported the first such step; SCDRO's own docstring example at
``lr=0.5`` had one that ended by itself, after which the model trained to 96 % accuracy. This
records, step by step, which steps stall (the flag each step passes to the guard, whatever
``stall_steps`` is), and lists every *run* of consecutive stalled steps: where it starts, how
long it lasts, whether it lasts to the end of the run (a genuine stall) or ends (transient),
and whether the model trained anyway.

Cases (all one process, CPU, float64):

- ``docstring``: SCDRO's docstring example (256 points, batches of 32, logistic loss) at
  ``lr`` in {0.5, 0.3, 0.2, 0.1}, ``--doc-steps`` steps; "trains": training accuracy > 0.9.
- ``table``: the common optimizer table's SCDRO row from lambda's floor (``lam_init=1e-3``,
  the stall test's case) and at ``lr=0.2`` (the rising row), ``--table-steps`` steps;
  "trains": the full-data KL-DRO value (the guard's window value) below its start.
- ``example``: ``benchmarks/scdro_example_settings.py``'s 32 settings on its three data sets
  (``--epochs`` epochs of 16 batches); "trains": that benchmark's rule (worst-group loss
  below its start, lambda above lambda_0), without its "no warning" part.

    python benchmarks/scdro_stall_lengths.py [--epochs 10] [--doc-steps 200]
        [--table-steps 200] [--out benchmarks/results/scdro_stall_lengths]

Writes ``results.json`` (every run's stall runs) and ``results.md`` (the runs with a stall,
and the summary: the longest transient run, the shortest run that lasted to the end).
"""
import argparse
import os
import sys
import time

import torch

from riskopt.bench._io import write_results
from riskopt.torch.optim import SCDRO, _drive as D
from riskopt.torch.optim._guard import GuardMixin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scdro_example_settings as E  # noqa: E402


class _Recorder:
    """Records the flag every ``_flag_stall`` call receives (one per step)."""

    def __init__(self):
        self.flags, self._orig = [], GuardMixin._flag_stall

    def __enter__(self):
        rec = self

        def spy(opt, stalled, info, *persist):
            rec.flags.append(bool(stalled))
            return rec._orig(opt, stalled, info, *persist)

        GuardMixin._flag_stall = spy
        return self

    def __exit__(self, *exc):
        GuardMixin._flag_stall = self._orig


def stall_runs(flags):
    """``[(first step (1-based), length, lasts to the end)]`` of the runs of True."""
    out, start = [], None
    for k, f in enumerate(list(flags) + [False], 1):
        if f and start is None:
            start = k
        elif not f and start is not None:
            out.append((start, k - start, k - 1 == len(flags)))
            start = None
    return out


def _run_text(first, length, to_end):
    return f"({first}, {length}{', end' if to_end else ''})"


def docstring_case(lr, steps):
    torch.manual_seed(0)
    X = torch.randn(256, 3)
    y = (X[:, 0] > 0).float()
    model = torch.nn.Linear(3, 1)
    opt = SCDRO(model.parameters(), radius=0.5, lr=lr, beta=0.5, on_divergence="ignore")
    with _Recorder() as rec:
        for t in range(steps):
            k = 32 * t
            idx = torch.arange(k, k + 32) % 256
            losses = torch.nn.functional.binary_cross_entropy_with_logits(
                model(X[idx])[:, 0], y[idx], reduction="none")
            opt.zero_grad()
            opt.surrogate(losses).backward()
            opt.step()
    acc = float(((model(X)[:, 0] > 0).float() == y).float().mean())
    return dict(case="docstring", setting=f"lr={lr:g}", steps=steps, flags=rec.flags,
                outcome=f"accuracy {acc:.3f}", trains=acc > 0.9, lam=opt.lam)


def table_case(label, steps, **kw):
    X, y, _, model = D.make_problem()
    opt = D.make_optimizer("scdro", model.parameters(), X.shape[0], 4,
                           on_divergence="ignore", check_every=0, **kw)

    def value():
        with torch.no_grad():
            return float(opt._window_value([0.5 * (model(X)[:, 0] - y) ** 2]))

    start = value()
    with _Recorder() as rec:
        for idx in D.batches(X.shape[0], steps):
            opt.zero_grad()
            opt.surrogate(0.5 * (model(X[idx])[:, 0] - y[idx]) ** 2).backward()
            opt.step()
    end = value()
    return dict(case="table", setting=label, steps=steps, flags=rec.flags,
                outcome=f"KL-DRO value {start:.4g} -> {end:.4g}", trains=end < start,
                lam=opt.lam)


def example_case(kind, lr, beta, lam0, lam_init, epochs):
    with _Recorder() as rec:
        r = E.run(kind, lr, beta, lam0, lam_init, epochs)
    trains = r["end_worst"] < r["start_worst"] and r["lam"] > lam0
    return dict(case=f"example/{kind}",
                setting=f"lr={lr:g} beta={beta:g} lambda_0={lam0:g} lam_init={lam_init:g}",
                steps=len(rec.flags), flags=rec.flags,
                outcome=f"worst {r['start_worst']:.4f} -> {r['end_worst']:.4g}",
                trains=trains, lam=r["lam"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--doc-steps", type=int, default=200)
    ap.add_argument("--table-steps", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/scdro_stall_lengths")
    args = ap.parse_args()
    t0, rows = time.process_time(), []
    for lr in (0.5, 0.3, 0.2, 0.1):
        rows.append(docstring_case(lr, args.doc_steps))
    rows.append(table_case("lam_init=1e-3", args.table_steps, lam_init=1e-3))
    rows.append(table_case("lr=0.2", args.table_steps, lr=0.2))
    for kind in ("squared", "standardised", "logistic"):
        for lr, beta, lam0, lam_init in E.GRID:
            rows.append(example_case(kind, lr, beta, lam0, lam_init, args.epochs))
    for r in rows:
        r["runs"] = stall_runs(r.pop("flags"))
    transient = [(n, r) for r in rows for _, n, end in r["runs"] if not end]
    final = [(n, r) for r in rows for _, n, end in r["runs"] if end]
    lines = []
    if transient:
        n, r = max(transient, key=lambda t: t[0])
        lines.append(f"- transient stall runs (ended before the run did): {len(transient)} in "
                     f"{len({id(r) for _, r in transient})} runs; the longest {n} steps "
                     f"({r['case']} {r['setting']}, {r['outcome']})")
    else:
        lines.append("- transient stall runs: none")
    if final:
        n, r = min(final, key=lambda t: t[0])
        lines.append(f"- stall runs lasting to the end: {len(final)}; the shortest {n} steps "
                     f"({r['case']} {r['setting']}, {r['outcome']})")
    trained = [r for r in rows if r["runs"] and r["trains"]]
    lines.append(f"- runs with a stall that trained anyway: {len(trained)} of "
                 f"{sum(bool(r['runs']) for r in rows)} runs with a stall ("
                 + "; ".join(f"{r['case']} {r['setting']}: runs {r['runs']}" for r in trained)
                 + ")")
    table = [("case", "setting", "steps", "stall runs (first step, length, to the end)",
              "outcome", "trains", "lambda end"), ("---",) * 7] + [
        (r["case"], r["setting"], r["steps"], ", ".join(_run_text(*run) for run in r["runs"]),
         r["outcome"], "yes" if r["trains"] else "no", f"{r['lam']:.4g}")
        for r in rows if r["runs"]]
    quiet = sum(not r["runs"] for r in rows)
    md = ["# How long SCDRO's stalls last", "",
          f"`python benchmarks/scdro_stall_lengths.py --epochs {args.epochs} --doc-steps "
          f"{args.doc_steps} --table-steps {args.table_steps}` (CPU "
          f"{time.process_time() - t0:.0f} s)", "", *lines,
          f"- runs without any stall: {quiet} of {len(rows)}", "",
          *("| " + " | ".join(map(str, row)) + " |" for row in table)]
    write_results(args.out, dict(epochs=args.epochs, doc_steps=args.doc_steps,
                                 table_steps=args.table_steps, rows=rows), md)


if __name__ == "__main__":
    main()
