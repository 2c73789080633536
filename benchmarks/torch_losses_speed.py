"""Forward + backward time of each riskopt.torch risk loss as a ratio to ``losses.mean()`` +
backward, one thread, CPU (issue 28: goal at most 3x plus 20 us).

For each loss and batch size ``b`` a leaf tensor of ``b`` float32 losses (one of four drawn
batches, in turn, as in training: a loss that starts its solve from the previous call's
solution never sees the same batch twice in a row) is pushed through the loss and
``.backward()`` is called; the time per call is the median over ``--reps`` interleaved
blocks (loss block, mean block, ...) of the *CPU time of the calling thread*
(``time.thread_time``; torch set to one thread), so that the time slices the loaded shared
machine gives to other processes are not counted. The ratio ``loss / mean`` and the goal
``loss <= 3 mean + 20 us`` are computed within one process; ``--src`` measures another
checkout (e.g. the code before the change: ``git archive 03ea400d src | tar -x -C
/tmp/base``), and its ratios land in the same results file under ``--label``.

    python benchmarks/torch_losses_speed.py --label after
    python benchmarks/torch_losses_speed.py --src /tmp/base/src --label before

``--only KLDRO ESRM`` keeps the losses whose name contains one of the texts (a reduced
table); ``--sizes 8192`` the batch sizes.

``--ab-host`` also times each ``SpectralRiskLoss`` step with its float32 fast host path
switched off (the general host path: float64 copy, checks, ``spectral_risk_weights``), in
blocks interleaved with the others: what the fast path saves, block pair by block pair, in
one process (the drift between processes does not enter).

``--glue`` (the current tree only) also times the host path's numba oracle alone (the
kernel call the loss makes, on float64 copies of the same four batches, or the float32
losses themselves for the KL kernels, which read them), interleaved with the two others,
and reports the glue ``loss - mean - oracle``: what the torch side (module call, checks,
copies, the autograd node and its backward) adds to a ``mean()`` step, in ``mean()``
steps (a target of issue 28: at most 0.5 at b = 8192). The oracle alone runs with warm
caches and a branch history of the same four batches, so that glue also holds what the
oracle costs more inside a step; the second measure, "stubbed", times the loss with its
kernel module replaced by a stand-in that only writes uniform weights (every other line
of the loss runs) against ``mean()``: the torch side alone.

Every row also has its *paired margin*: ``3 mean_i + 20 us - loss_i`` of each adjacent
(loss block, mean block) pair ``i``, its median over the blocks, in us and in % of the goal
``3 mean + 20``: a drift of the machine's speed within the process moves both blocks of a
pair alike. ``--processes K`` runs the measurement in K fresh processes one after the
other (each interleaving loss and mean blocks as above: the speed of the shared machine
also moves between processes, by up to 50 % on the mean's own step) and reports, per loss
and size, each process's ratio and paired margin and over the processes the median, the
least and the largest; the goal is met in a process where its median paired margin is
positive, and with margin where it is at least 15 % of the goal in every process:

    python benchmarks/torch_losses_speed.py --processes 5 --sizes 8192 --label after
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=os.path.join(HERE, "..", "src"))
    p.add_argument("--label", default="after")
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 8192])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--block-ms", type=float, default=25.0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "torch_losses_speed"))
    p.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                   help="only the losses whose name contains one of these texts")
    p.add_argument("--glue", action="store_true",
                   help="also time the numba oracle alone: glue = loss - mean - oracle")
    p.add_argument("--ab-host", action="store_true",
                   help="also time the loss with its float32 fast host path switched off "
                        "(the general host path: float64 copy, checks), interleaved")
    p.add_argument("--processes", type=int, default=0, metavar="K",
                   help="measure in K fresh processes and report the paired margins over "
                        "them (see the module docstring)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.processes < 0 or a.reps < 1 or a.block_ms <= 0:
        p.error("--processes >= 0, --reps >= 1 and --block-ms > 0 are needed")
    return a


def _cases(ro, rt):
    import inspect
    has_oracle = "oracle" in inspect.signature(rt.SpectralRiskLoss).parameters
    cases = {
        "SpectralRiskLoss(CVaR(0.1))": lambda: rt.SpectralRiskLoss(ro.CVaR(0.1)),
        "SpectralRiskLoss(ESRM(1, shift_cost=1))":
            lambda: rt.SpectralRiskLoss(ro.ESRM(1.0, shift_cost=1.0)),
        "SpectralRiskLoss(Extremile(2, shift_cost=0.1, kl))":
            lambda: rt.SpectralRiskLoss(ro.Extremile(2.0, shift_cost=0.1, divergence="kl")),
        "KLDROLoss(shift_cost=1)": lambda: rt.KLDROLoss(shift_cost=1.0),
        "KLDROLoss(radius=0.5)": lambda: rt.KLDROLoss(radius=0.5),
        "GroupDROLoss(4)": lambda: rt.GroupDROLoss(4),
        "GroupDROLoss(4, cvar)": lambda: rt.GroupDROLoss(4, mode="cvar"),
    }
    if has_oracle:
        cases["SpectralRiskLoss(ESRM(1, shift_cost=1), oracle=torch)"] = \
            lambda: rt.SpectralRiskLoss(ro.ESRM(1.0, shift_cost=1.0), oracle="torch")
        cases["SpectralRiskLoss(Extremile(2, shift_cost=0.1, kl), oracle=torch)"] = \
            lambda: rt.SpectralRiskLoss(ro.Extremile(2.0, shift_cost=0.1, divergence="kl"),
                                        oracle="torch")
        cases["KLDROLoss(radius=0.5, oracle=torch)"] = \
            lambda: rt.KLDROLoss(radius=0.5, oracle="torch")
    return cases


def _per_call(fn, n):
    # CPU time of this thread (torch runs with one thread): on the shared machine (load
    # ~20 on 2 cores) wall-clock blocks mostly measure the time slices given to others
    t0 = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t0) / n


def _oracle_step(crit, xs, it):
    """The numba oracle call of the host path of ``crit`` on the batches ``xs`` in turn (the
    kernel alone: see the module docstring), or None (no such single call)."""
    import numpy as np
    name = type(crit).__name__
    b = xs[0].shape[0]
    q, dn = np.empty(b), np.empty(b)
    if name == "SpectralRiskLoss" and crit.oracle == "auto":
        if getattr(crit, "_batch_args", None) and crit._batch_args(b) is not None:
            # (stop 42: a float32 batch goes to the one-call kernel, read in place)
            from riskopt._kernels import oracle_batch as kb
            sigma, nu, div = crit._batch_args(b)
            ls = [x.detach().numpy() for x in xs]
            return lambda: kb.batch_risk_weights_f32(ls[it[0] & 3], sigma, nu, div, q)
        from riskopt._kernels import oracles as ko
        sigma, nu, div, plan = crit._oracle_args(b)
        ls = [x.detach().double().numpy() for x in xs]
        # (radix=True, as the loss calls it: the small-batch sort, the one-call kernel)
        return lambda: ko.spectral_risk_weights(ls[it[0] & 3], sigma, nu, div, q, plan,
                                                radix=True)
    if name == "KLDROLoss" and crit.oracle == "auto":
        from riskopt._kernels import kl_dro as kk
        ls = [x.detach().numpy() for x in xs]
        if crit.radius is None:
            return lambda: kk.kl_penalised(ls[it[0] & 3], crit.shift_cost, q, dn)
        return lambda: kk.kl_constrained(ls[it[0] & 3], crit.radius, crit.shift_cost,
                                         crit._a_warm, q, dn, 1e-10)
    return None


def _in_step_kernel(crit):
    """``(module, name)`` of the kernel function that the host path of ``crit`` calls in a
    step (wrapped with a wall-clock timer to time the kernel inside the step), or None."""
    if type(crit).__name__ != "SpectralRiskLoss" or crit.oracle != "auto":
        return None
    from riskopt.torch.losses import spectral as mod
    if "_host_fast" in type(crit).__dict__:   # (stop 42: the float32 batch's kernel)
        return mod._kb, "_batch_weights"
    return mod._ko, "spectral_risk_weights"


def _stubbed(crit, b):
    """``(module, name, stub)``: the module global of ``crit``'s host path that holds its
    numba kernels and a stand-in that only writes uniform weights (the glue alone: every
    other line of the loss runs), or None."""
    import types
    name = type(crit).__name__
    if name == "SpectralRiskLoss" and crit.oracle == "auto":
        from riskopt.torch.losses import spectral as mod

        def srw(l, sigma, nu, div, q, plan, radix=False):
            q.fill(1.0 / b)
            return 1.0
        crit._oracle_args(b)  # (the spectrum and plan cached, as in a training loop)
        if getattr(crit, "_batch_args", None) and crit._batch_args(b) is not None:
            def f32(l, bits, sigma, nu, div, q, *scratch):   # (stop 42: the float32
                q.fill(1.0 / b)                               # batch's kernel)
                return 1.0, True
            return mod, "_kb", types.SimpleNamespace(_batch_weights=f32,
                                                     _scratch=lambda n: ())
        return mod, "_ko", types.SimpleNamespace(spectral_risk_weights=srw)
    if name == "KLDROLoss" and crit.oracle == "auto":
        from riskopt.torch.losses import kl as mod

        def pen(l, lam, q, dn):
            q.fill(1.0 / b)
            return 1.0

        def con(l, rho, lam0, a0, q, dn, tol):
            q.fill(1.0 / b)
            return 1.0, 1.0, 0.0
        return mod, "_kk", types.SimpleNamespace(kl_penalised=pen, kl_constrained=con)
    return None


def _measure(torch, crit, b, reps, block_ms, glue=False, ab=False):
    g = torch.Generator().manual_seed(b)
    # four batches of losses in turn (see the module docstring)
    xs = [(torch.rand(b, generator=g) * 3).requires_grad_() for _ in range(4)]
    groups = torch.arange(b) % 4
    is_group = type(crit).__name__ == "GroupDROLoss"
    it = [0]

    def loss_step():
        it[0] += 1
        x = xs[it[0] & 3]
        x.grad = None
        (crit(x, groups) if is_group else crit(x)).backward()

    def mean_step():
        it[0] += 1
        x = xs[it[0] & 3]
        x.grad = None
        x.mean().backward()

    for f in (loss_step, mean_step):  # warm up (numba compile, caches)
        for _ in range(3):
            f()
    ostep = _oracle_step(crit, xs, it) if glue else None
    stub = _stubbed(crit, b) if ostep else None

    def oracle_step():
        it[0] += 1
        ostep()

    def stub_block(n):
        mod, attr, fake = stub
        real = getattr(mod, attr)
        setattr(mod, attr, fake)
        try:
            return _per_call(loss_step, n)
        finally:
            setattr(mod, attr, real)

    kin = _in_step_kernel(crit) if ostep else None
    ab = ab and "_host_fast" in type(crit).__dict__

    def general_block(n):   # the same loss, its fast host path switched off
        crit._host_fast = lambda losses: None
        try:
            return _per_call(loss_step, n)
        finally:
            del crit._host_fast
    tg = []
    kt = []

    def in_step_block(n):
        mod, attr = kin
        real = getattr(mod, attr)

        def timed(*args, **kw):
            t0 = time.perf_counter()
            v = real(*args, **kw)
            kt.append(time.perf_counter() - t0)
            return v
        setattr(mod, attr, timed)
        try:
            for _ in range(n):
                loss_step()
        finally:
            setattr(mod, attr, real)

    n_l = max(3, int(block_ms * 1e-3 / max(_per_call(loss_step, 3), 1e-7)))
    n_m = max(3, int(block_ms * 1e-3 / max(_per_call(mean_step, 10), 1e-7)))
    n_o = ostep and max(3, int(block_ms * 1e-3 / max(_per_call(oracle_step, 10), 1e-7)))
    tl, tm, to, ts = [], [], [], []
    if stub:
        stub_block(3)
    for _ in range(reps):
        tl.append(_per_call(loss_step, n_l))
        tm.append(_per_call(mean_step, n_m))
        if ostep:
            to.append(_per_call(oracle_step, n_o))
        if stub:
            ts.append(stub_block(n_m))
        if kin:
            in_step_block(n_l)
        if ab:
            tg.append(general_block(n_l))
    loss_us, mean_us = statistics.median(tl) * 1e6, statistics.median(tm) * 1e6
    # the paired margins: each loss block against the mean block next to it
    margins = [(3 * m + 20e-6 - l) * 1e6 for l, m in zip(tl, tm)]
    pct = [100 * (3 * m + 20e-6 - l) / (3 * m + 20e-6) for l, m in zip(tl, tm)]
    r = {"loss_us": round(loss_us, 2), "mean_us": round(mean_us, 2),
         "ratio": round(loss_us / mean_us, 2),
         "goal_us": round(3 * mean_us + 20, 2), "meets_goal": loss_us <= 3 * mean_us + 20,
         "margin_us": round(statistics.median(margins), 2),
         "margin_pct": round(statistics.median(pct), 2)}
    if ostep:
        oracle_us = statistics.median(to) * 1e6
        glue_us = loss_us - mean_us - oracle_us
        r.update(oracle_us=round(oracle_us, 2), glue_us=round(glue_us, 2),
                 glue_in_means=round(glue_us / mean_us, 2))
    if tg:
        # the general host path against the fast one, block pair by block pair
        gen_us = statistics.median(tg) * 1e6
        r.update(general_us=round(gen_us, 2), general_ratio=round(gen_us / mean_us, 2),
                 fast_saves_us=round(statistics.median(
                     [(g - l) * 1e6 for g, l in zip(tg, tl)]), 2),
                 general_margin_pct=round(statistics.median(
                     [100 * (3 * m + 20e-6 - g) / (3 * m + 20e-6) for g, m in zip(tg, tm)]), 2))
    if kt:
        # (wall clock of each kernel call inside loss steps: the oracle in the step)
        r.update(oracle_in_step_us=round(statistics.median(kt) * 1e6, 2))
    if stub:
        stub_us = statistics.median(ts) * 1e6 - mean_us
        r.update(stub_glue_us=round(stub_us, 2), stub_glue_in_means=round(stub_us / mean_us, 2))
    return r


def _summary(runs):
    """Per loss and size, the paired results of K processes (``runs``: their ``cases``):
    each process's ratio and margin, and over them the median, least and largest."""
    out = {}
    for name in runs[0]:
        out[name] = {}
        for b in runs[0][name]:
            rs = [run[name][b] for run in runs]

            def stat(key):
                v = [r[key] for r in rs]
                return {"median": round(statistics.median(v), 2), "min": min(v), "max": max(v),
                        "each": v}
            pct = stat("margin_pct")
            out[name][b] = {"ratio": stat("ratio"), "loss_us": stat("loss_us"),
                            "mean_us": stat("mean_us"), "margin_us": stat("margin_us"),
                            "margin_pct": pct, "processes": len(rs),
                            "met": sum(r["margin_us"] > 0 for r in rs),
                            "met_15pct": sum(r["margin_pct"] >= 15 for r in rs)}
            if all("general_us" in r for r in rs):   # (--ab-host)
                out[name][b].update(general_margin_pct=stat("general_margin_pct"),
                                    fast_saves_us=stat("fast_saves_us"))
    return out


def _markdown_processes(info):
    k = info["processes"]
    lines = [f"Paired over {k} fresh processes (each: loss and mean blocks interleaved; "
             "margin = median over block pairs of 3 mean + 20 us - loss, in us and in % of "
             "the goal; the goal is met in a process where its margin is > 0):", "",
             "| loss | b | ratio median [min, max] | margin us median [min, max] | "
             "margin % median [min, max] | met (>= 15 %) in | per process: ratio / margin % |",
             "|---|---|---|---|---|---|---|"]
    for name, per in info["summary"].items():
        for b, s in per.items():
            r, m, p = s["ratio"], s["margin_us"], s["margin_pct"]
            each = ", ".join(f"{x:.2f} / {y:+.0f}" for x, y in zip(r["each"], p["each"]))
            lines.append(
                f"| {name} | {b} | {r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}] | "
                f"{m['median']:+.0f} [{m['min']:+.0f}, {m['max']:+.0f}] | "
                f"{p['median']:+.1f} [{p['min']:+.1f}, {p['max']:+.1f}] | "
                f"{s['met']} ({s['met_15pct']}) of {s['processes']} | {each} |")
    ab = [(name, b, s) for name, per in info["summary"].items() for b, s in per.items()
          if "fast_saves_us" in s]
    if ab:
        lines += ["", "The same processes with the fast host path switched off (``--ab-host``: "
                  "the general host path, interleaved in each process):", "",
                  "| loss | b | general path margin % median [min, max] | fast path saves us "
                  "median [min, max] |", "|---|---|---|---|"]
        for name, b, s in ab:
            g, f = s["general_margin_pct"], s["fast_saves_us"]
            lines.append(f"| {name} | {b} | {g['median']:+.1f} [{g['min']:+.1f}, "
                         f"{g['max']:+.1f}] | {f['median']:.0f} [{f['min']:.0f}, "
                         f"{f['max']:.0f}] |")
    return lines + [""]


def _markdown(res):
    lines = ["# Forward + backward of each loss vs `losses.mean()` + backward (CPU, 1 thread)",
             "", "Ratio = loss time / mean time, measured side by side in one process "
             "(medians of interleaved blocks of thread CPU time; the 2-core machine was shared "
             "and loaded). "
             "Goal (issue 28): loss <= 3 x mean + 20 us.", ""]
    for label, info in res.items():
        lines += [f"## {label}", "", f"source: `{info['src']}`, torch {info['torch']}", ""]
        if "summary" in info:
            lines += _markdown_processes(info)
            continue
        sizes = sorted({int(b) for c in info["cases"].values() for b in c})
        lines.append("| loss | " + " | ".join(f"b={b}: us (ratio) goal" for b in sizes) + " |")
        lines.append("|---|" + "---|" * len(sizes))
        for name, per in info["cases"].items():
            cells = []
            for b in sizes:
                r = per.get(str(b))
                cells.append("-" if r is None else
                             f"{r['loss_us']:.0f} ({r['ratio']:.1f}x) "
                             f"{'met' if r['meets_goal'] else 'not met'}"
                             + (f", paired margin {r['margin_pct']:+.0f} %"
                                if "margin_pct" in r else "")
                             + (f"; general host path {r['general_us']:.0f} "
                                f"({r['general_ratio']:.1f}x, margin "
                                f"{r['general_margin_pct']:+.0f} %), fast path saves "
                                f"{r['fast_saves_us']:.0f} us" if "general_us" in r else ""))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
        glue = [(name, per) for name, per in info["cases"].items()
                if any("glue_us" in r for r in per.values())]
        if glue:
            lines += ["Host glue (us; in mean() steps): oracle alone; loss - mean - oracle; the "
                      "loss with its kernel stubbed (uniform weights written) - mean; the oracle "
                      "inside loss steps (median wall clock of its calls):", "",
                      "| loss | " + " | ".join(f"b={b}: oracle; glue (means); stubbed (means); "
                                               "in step" for b in sizes)
                      + " |", "|---|" + "---|" * len(sizes)]
            for name, per in glue:
                cells = []
                for b in sizes:
                    r = per.get(str(b)) or {}
                    cells.append(f"{r['oracle_us']:.0f}; {r['glue_us']:.0f} "
                                 f"({r['glue_in_means']:.2f}); {r['stub_glue_us']:.0f} "
                                 f"({r['stub_glue_in_means']:.2f}); "
                                 f"{r.get('oracle_in_step_us', float('nan')):.0f}"
                                 if "stub_glue_us" in r else "-")
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines) + "\n"


def _processes(a):
    """The measurement in ``a.processes`` fresh processes, one after the other."""
    import subprocess
    import tempfile
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for k in range(a.processes):
            path = os.path.join(d, f"run{k}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--src", a.src, "--reps",
                   str(a.reps), "--block-ms", str(a.block_ms), "--worker", path,
                   "--sizes", *map(str, a.sizes)] + (["--only", *a.only] if a.only else []) \
                + (["--ab-host"] if a.ab_host else [])
            print(f"process {k + 1} of {a.processes}", flush=True)
            subprocess.run(cmd, check=True)
            with open(path) as f:
                runs.append(json.load(f))
    out = dict(runs[0], cases={})
    out["processes"] = a.processes
    out["runs"] = [r["cases"] for r in runs]
    out["summary"] = _summary(out["runs"])
    for line in _markdown_processes(out):
        print(line)
    return out


def main():
    a = _args()
    sys.path.insert(0, os.path.abspath(a.src))
    if a.processes:
        from riskopt.bench._io import atomic_write_text
        _save(a, _processes(a), atomic_write_text)
        return
    import torch
    torch.set_num_threads(1)
    import riskopt as ro
    import riskopt.torch as rt
    from riskopt.bench._io import atomic_write_text
    print("riskopt from", ro.__file__)
    out = {"src": os.path.relpath(os.path.abspath(a.src), os.path.join(HERE, "..")),
           "torch": torch.__version__, "cases": {}}
    for name, make in _cases(ro, rt).items():
        if a.only and not any(t in name for t in a.only):
            continue
        per = {}
        for b in a.sizes:
            per[str(b)] = r = _measure(torch, make(), b, a.reps, a.block_ms, a.glue, a.ab_host)
            glue = (f"  oracle {r['oracle_us']:7.1f} us  glue {r['glue_us']:6.1f} us"
                    f" = {r['glue_in_means']:.2f} mean" if "glue_us" in r else "")
            glue += (f"  stubbed {r['stub_glue_us']:6.1f} us = {r['stub_glue_in_means']:.2f}"
                     " mean" if "stub_glue_us" in r else "")
            glue += (f"  general path {r['general_us']:7.1f} us (margin "
                     f"{r['general_margin_pct']:+.1f} %), the fast one saves "
                     f"{r['fast_saves_us']:.1f} us" if "general_us" in r else "")
            glue += (f"  oracle in step {r['oracle_in_step_us']:6.1f} us"
                     if "oracle_in_step_us" in r else "")
            print(f"{name:62s} b={b:5d} loss {r['loss_us']:9.1f} us  mean {r['mean_us']:7.1f}"
                  f" us  ratio {r['ratio']:6.1f}  goal {'met' if r['meets_goal'] else 'NOT'}"
                  + f"  margin {r['margin_pct']:+6.1f} %" + glue, flush=True)
        out["cases"][name] = per
    if a.worker:
        atomic_write_text(a.worker, json.dumps(out) + "\n")
        return
    _save(a, out, atomic_write_text)


def _save(a, out, atomic_write_text):
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "results.json")
    res = {}
    if os.path.exists(path):
        with open(path) as f:
            res = json.load(f)
    res[a.label] = out
    atomic_write_text(path, json.dumps(res, indent=1) + "\n")
    atomic_write_text(os.path.join(a.out, "results.md"), _markdown(res))


if __name__ == "__main__":
    main()
