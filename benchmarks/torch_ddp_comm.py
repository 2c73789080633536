"""Per-step communication of the torch optimizers under DDP (2 gloo ranks, CPU) against plain
DDP with ``torch.optim.SGD`` on the same model.

An MLP (``d -> hidden -> 1``, float32) on batches of ``--batch`` rows per rank. For each
optimizer of the common table (one row per optimizer) and for SGD on the mean loss, both
ranks run ``--repeats`` blocks of ``--steps`` steps (after 3 warm-up steps; a barrier before
and after each block; SGD, the optimizer without and with the gathers interleaved; the best
block of each counts) and report

* the optimizer's own collectives per step and the bytes each rank receives from them (the
  gathered batch statistics; DDP's gradient all-reduce, the same for every optimizer, is
  ``4 x #parameters`` bytes per step and not counted);
* the wall time spent in those collectives per step (mean over all steps, waiting for the
  slower rank included: an upper bound of what the communication costs);
* the best block's step time, and its ratio to plain DDP + SGD's (the goal of issue 27: at most
  1.5 at batch 256 per rank), with the ratio of the median blocks and of rank 0's CPU time per
  step (median; the waits for the other rank excluded), which the machine's load moves less;
* for the optimizers that can carry their statistics on DDP's gradient all-reduce
  (``opt.attach(ddp)``: SCDRO, PG-SMD2), a row ``(attach)``: no collective of their own (a
  DDP model of its own, the same weights); its bytes are those carried on the all-reduce;
* a row "one bare all-gather": a collective of a typical gather's size (the header and three
  float64 columns of the rank's rows) and nothing else, as a ratio to the SGD step: the
  floor of what an optimizer's own gather adds (latency and the wait for the other rank);
* four "floor" rows (``--no-floors`` skips them): plain DDP + SGD plus only what an
  algorithm cannot avoid, no optimizer code: one gather of that size between the forward
  and the backward (the floor of every gathering optimizer); the same with the loss the
  group methods are driven with (the mean of the batch's group means, ``torch.unique`` and
  ``index_add_``, plus a tenth of the mean loss: the floor of SONX, SOX and OOA, whose
  losses are per group); the same plus a no-grad
  forward at a second parameter vector (the MSVR methods SONEX and ALEXR2 need the inner
  values at the previous iterate); the same plus a forward with graph there and its
  backward (ASCDRO's STORM estimator needs the gradient at the previous iterate; a lower
  bound: that gradient is not all-reduced here). A floor above 1.5 shows that no
  implementation of that algorithm reaches the goal on this model;
* with ``--tensor-code``, a row ``(tensor code)`` per optimizer: the same optimizer with
  the eager CPU host paths switched off (the gathers' NumPy packing and merge, OOA's
  group step in NumPy; what runs on GPUs and under compile),
  interleaved: what those paths save, side by side;
* one-process rows (``--no-solo`` skips them): the same optimizer with
  ``process_group=False`` on a model of its own, without DDP, against SGD without DDP, both
  timed while the other rank does the same (the same load): the optimizer's algorithmic
  floor (what it computes, the loss's group means and any second forward included), and the
  DDP overhead ``x (median) / x one process``: what DDP and the gathers add beyond plain
  DDP + SGD's own DDP cost. A DDP ratio above 1.5 whose one-process ratio is too is out of
  reach of any communication scheme;
* per gather (the optimizers', the bare and the floor rows'), the median arrival skew of the
  two ranks (the wait for the slower one) and the median time of the collective itself,
  from the later arrival to the later exit (``time.time()``: one clock on one host): whether
  a gather costs its latency or the wait for a rank that is behind;
* for PG-SMD2, a row ``(... overlap=True)``: the same optimizer with its opt-in
  ``overlap = True`` (the gather launched non-blocking in ``weights`` and waited for in
  ``step``, overlapping the backward and DDP's all-reduce), interleaved with the default
  (the gather waited for where it is launched); "ms / step in the gathers" counts the
  launch and the wait only (the exposed time), and the arrival skew / collective columns
  time the launch only for the overlapped row;
* the same optimizer with ``process_group=False`` (no gather: the local, inexact state),
  so that ``time / time_local`` isolates what the gathers cost. The optimizers' own extra
  work (ASCDRO's and the MSVR methods' second forward pass at the previous iterate) is in
  both times.

The machine is shared (2 cores for 2 ranks and others' jobs): compare the ratios within
one run only. Output: ``benchmarks/results/torch_ddp_comm/`` (JSON and Markdown).

Usage::

    python benchmarks/torch_ddp_comm.py [--batch 256] [--steps 10] [--repeats 4] [--hidden 256 [1024 ...]]
        [--rows scdro ...] [--out DIR]

SONX and SOX skip the forward pass at the previous iterate (they do not use ``g_prev``).
"""
import argparse
import collections
import copy
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from riskopt.bench._io import write_results
from riskopt.bench._meta import int_options
from riskopt.torch.optim import _drive as D

OUT = Path(__file__).resolve().parent / "results" / "torch_ddp_comm"
ROWS = ["scdro", "ascdro", "pgsmd2", "sonex", "sonx", "sox", "alexr2", "ooa"]
WORLD = 2


class _Arrivals:
    """Each all-gather's entry and exit time (``time.time()``: one clock for the ranks of one
    host), by timed block: the wait for the other rank (the ranks' arrival skew) apart from
    the collective itself (from the later arrival to the later exit)."""

    def __init__(self):
        self.key, self.calls = None, collections.defaultdict(list)

    def wrap(self, fn):
        def gather(*args, **kwargs):
            t0 = time.time()
            got = fn(*args, **kwargs)
            if self.key is not None:
                self.calls[self.key].append((t0, time.time()))
            return got
        return gather

    @staticmethod
    def summary(per_rank):
        """``{key: (median |skew|, median collective)}`` in seconds, from every rank's
        ``calls`` (the ranks' i-th calls of a block are the same collective)."""
        out = {}
        for key in per_rank[0]:
            pairs = list(zip(*(r.get(key, []) for r in per_rank)))
            if pairs:
                out[key] = (statistics.median(max(a for a, _ in c) - min(a for a, _ in c)
                                              for c in pairs),
                            statistics.median(max(e for _, e in c) - max(a for a, _ in c)
                                              for c in pairs))
        return out


ARRIVALS = _Arrivals()


def _timed(step, steps, warmup=3, key=None):
    """``(wall, cpu)`` seconds per step of a block of ``steps`` steps between two barriers
    (both ranks start together; the block ends with the slower), after ``warmup`` steps;
    ``cpu``: this process' CPU time (the waits for the other rank excluded). The block's
    gathers are recorded under ``key`` (:class:`_Arrivals`)."""
    for _ in range(warmup):
        step()
    dist.barrier()
    ARRIVALS.key = key
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    c1 = time.process_time()
    ARRIVALS.key = None
    dist.barrier()
    return (time.perf_counter() - t0) / steps, (c1 - c0) / steps


def _host_code(on):
    """Switch the eager CPU host paths (NumPy gathers and merges, OOA's step) on or off (off: the tensor code that runs on GPUs), where the tree has them."""
    try:
        from riskopt.torch.distributed import ColumnGatherer
        from riskopt.torch.optim import _updates
    except ImportError:
        return
    if hasattr(_updates, "HOST"):
        _updates.HOST = ColumnGatherer.host = on


def _worker(rank, path, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous", rank=rank,
                            world_size=WORLD)
    n = args.batch * WORLD * 8
    X, y, groups, module = D.make_problem(n=n, d=args.d, hidden=args.hidden,
                                          dtype=torch.float32)
    gen = torch.Generator().manual_seed(rank)
    out = {}

    def local_batch():
        return torch.randint(0, n, (args.batch,), generator=gen)

    def sgd_stepper(model, params):
        """SGD on ``model``'s mean loss (the goal's reference): ``(optimizer, step)``."""
        opt = torch.optim.SGD(params, lr=1e-3)

        def step():
            idx = local_batch()
            opt.zero_grad()
            (0.5 * (model(X[idx])[:, 0] - y[idx]) ** 2).mean().backward()
            opt.step()
        return opt, step

    ddp = torch.nn.parallel.DistributedDataParallel(module)
    sgd, sgd_step = sgd_stepper(ddp, module.parameters())

    # the floor of any gather: one bare collective of a typical gather's size (a header and
    # three columns of the rank's rows, float64), no other work, timed like the steps
    bare_in = torch.zeros(1 + 3 * args.batch, dtype=torch.float64)
    bare_out = torch.empty(WORLD * bare_in.numel(), dtype=torch.float64)
    out["bare"] = {"calls": 1.0, "bytes": 8.0 * bare_out.numel(), "gather_s": 0.0}

    gather = ARRIVALS.wrap(getattr(dist, "all_gather_single", None)
                           or dist.all_gather_into_tensor)
    try:                     # the optimizers' gathers, recorded the same way
        from riskopt.torch import distributed as rdist
        rdist._all_gather_single = ARRIVALS.wrap(rdist._all_gather_single)
    except (ImportError, AttributeError):
        pass

    def bare_gather():       # (not riskopt's: the script also runs against an older src)
        gather(bare_out, bare_in)

    # the floors: plain DDP + SGD plus only what an algorithm cannot do without (no
    # optimizer code): one gather of a typical size between the forward and the backward
    # (every gathering optimizer), and on top of it a no-grad forward at a second iterate
    # (MSVR: SONEX, ALEXR2 need the values at the previous iterate) or a forward with graph
    # and its backward there (STORM: ASCDRO needs the gradient at the previous iterate; the
    # twin's gradient is not all-reduced: a lower bound)
    twin = copy.deepcopy(module)

    def floor_step(extra):
        idx = local_batch()
        x, t = X[idx], y[idx]
        sgd.zero_grad()
        if extra == "groups":    # the loss the group methods are driven with, no optimizer
            losses = 0.5 * (ddp(x)[:, 0] - t) ** 2
            loss = D._group_means(losses, groups[idx])[1].mean() + 0.1 * losses.mean()
        else:
            loss = (0.5 * (ddp(x)[:, 0] - t) ** 2).mean()
        if extra == "nograd":
            with torch.no_grad():
                twin(x)
        elif extra == "graph":
            twin.zero_grad(set_to_none=True)
            loss = loss - 0.5 * (0.5 * (twin(x)[:, 0] - t) ** 2).mean()
        gather(bare_out, bare_in)
        loss.backward()
        sgd.step()

    floors = {f"floor/{e}": (lambda e=e: floor_step(e)) for e in ("gather", "groups", "nograd",
                                                                   "graph")
              } if args.floors else {}
    for key in floors:
        out[key] = {"calls": 1.0, "bytes": 8.0 * bare_out.numel(), "gather_s": 0.0}

    # one process's worth of work (no DDP, no gather; a model of its own): SGD and each
    # optimizer with process_group=False, timed while the other rank does the same (the same
    # load as the DDP blocks): the ratio of the two is the optimizer's algorithmic floor
    solo = copy.deepcopy(module)
    _, solo_sgd_step = sgd_stepper(solo, solo.parameters())

    blocks = {"sgd": [], "bare": [], **{key: [] for key in floors}}   # (wall, cpu) per block
    if args.solo:
        blocks["sgd/solo"] = []
    for name in args.rows:
        kind = D.ROWS[name][2]
        opts = {mode: (D.make_optimizer(name, module.parameters(), n, 4, lr=1e-4,
                                        process_group=pg, on_divergence="ignore"), ddp, module)
                for mode, pg in (("local", False), ("exact", None))}
        if hasattr(D.ROWS[name][0], "_finish_posted"):   # attach: a DDP model of its own
            mod = copy.deepcopy(module)
            opt = D.make_optimizer(name, mod.parameters(), n, 4, lr=1e-4,
                                   on_divergence="ignore")
            opts["hook"] = (opt, opt.attach(torch.nn.parallel.DistributedDataParallel(mod)),
                            mod)
        if hasattr(D.ROWS[name][0], "overlap"):  # the gather waited for where launched
            opt = D.make_optimizer(name, module.parameters(), n, 4, lr=1e-4,
                                   on_divergence="ignore")
            opt.overlap = True
            opts["overlap"] = (opt, ddp, module)
        if args.solo:            # one process: no DDP, no gather
            opts["solo"] = (D.make_optimizer(name, solo.parameters(), n, 4, lr=1e-4,
                                             process_group=False, on_divergence="ignore"),
                            solo, solo)
        if args.tensor_code:     # the same optimizer, eager CPU host paths off
            opts["tensor"] = (D.make_optimizer(name, module.parameters(), n, 4, lr=1e-4,
                                               on_divergence="ignore"), ddp, module)
        for mode in opts:
            blocks[f"{name}/{mode}"] = []
        for _ in range(args.repeats):    # interleaved: the machine's load drifts
            blocks["sgd"].append(_timed(sgd_step, args.steps))
            blocks["bare"].append(_timed(bare_gather, args.steps, key="bare"))
            if args.solo:
                blocks["sgd/solo"].append(_timed(solo_sgd_step, args.steps))
            for key, fn in floors.items() if name == args.rows[0] else ():
                blocks[key].append(_timed(fn, args.steps, key=key))   # (with the first row's)
            for mode, (opt, model, mod) in opts.items():
                _host_code(mode != "tensor")
                blocks[f"{name}/{mode}"].append(_timed(
                    lambda: D.drive_step(kind, opt, model, mod, X, y, groups, local_batch()),
                    args.steps, key=f"{name}/{mode}"))
                _host_code(True)
        for mode, (opt, _, _) in opts.items():
            g = opt._gatherer
            total = args.repeats * (args.steps + 3)
            out[f"{name}/{mode}"] = {
                "calls": 0.0 if g is None else g.calls / total,
                "bytes": 0.0 if g is None else (g.bytes + getattr(g, "carried", 0)) / total,
                "gather_s": 0.0 if g is None else g.seconds / total}
    for key, got in blocks.items():
        wall, cpu = zip(*got)
        out.setdefault(key, {"calls": 0.0, "bytes": 0.0, "gather_s": 0.0}).update(
            time=min(wall), median=statistics.median(wall), cpu=statistics.median(cpu),
            walls=list(wall), cpus=list(cpu))
    calls = [None] * WORLD
    dist.all_gather_object(calls, dict(ARRIVALS.calls))
    for key, (skew, coll) in _Arrivals.summary(calls).items():
        out.setdefault(key, {"calls": 0.0, "bytes": 0.0, "gather_s": 0.0}).update(
            skew_s=skew, coll_s=coll)
    if rank == 0:
        torch.save(out, f"{path}/out.pt")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    int_options(ap, batch=256, steps=10, repeats=4)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256],
                    help="hidden width(s); several: one run each, in OUT/hidden<h>/")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--rows", nargs="+", default=ROWS, choices=list(D.ROWS),
                    help="the optimizers (default: one per optimizer)")
    ap.add_argument("--tensor-code", action="store_true",
                    help="add a row per optimizer with the CPU host paths off (the tensor "
                         "code), interleaved: their effect side by side")
    ap.add_argument("--no-floors", dest="floors", action="store_false",
                    help="skip the floor rows (SGD plus a gather, plus a second forward)")
    ap.add_argument("--no-solo", dest="solo", action="store_false",
                    help="skip the one-process rows (each optimizer and SGD without DDP and "
                         "without gathers: the algorithmic floor of each DDP ratio)")
    ap.add_argument("--out", default=str(OUT), help="results folder (default: %(default)s)")
    args = ap.parse_args()
    widths = args.hidden
    for h in widths:
        args.hidden = h
        report(args, Path(args.out) if len(widths) == 1 else Path(args.out) / f"hidden{h}")


def report(args, out_dir):
    """One run at ``args.hidden``; the tables to ``out_dir`` (and printed)."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory() as path:
        torch.multiprocessing.start_processes(_worker, args=(path, args), nprocs=WORLD,
                                              start_method=method)
        out = torch.load(f"{path}/out.pt", weights_only=True)
    write_report(args, out_dir, out)


def write_report(args, out_dir, out):
    """The rows from the ranks' timings ``out``: ``results.json`` first (atomically), then
    the Markdown (:func:`markdown`), so that a formatting error keeps the measured data."""
    n_params = args.d * args.hidden + 2 * args.hidden + 1
    sgd = out["sgd"]

    solo_sgd = out.get("sgd/solo")

    def row(label, ex, lo=None, solo=None):
        one = None if solo is None or solo_sgd is None else solo["median"] / solo_sgd["median"]
        ddp = ex["median"] / sgd["median"]
        return {"optimizer": label, "ms_per_step": 1e3 * ex["time"],
                "one_process_ratio": one, "one_process_cpu_ratio": None if one is None else
                solo["cpu"] / solo_sgd["cpu"],
                "ddp_overhead_ratio": None if one is None else ddp / one,
                "ratio_to_sgd": ex["time"] / sgd["time"],
                "median_ratio_to_sgd": ex["median"] / sgd["median"],
                "cpu_ms_per_step": 1e3 * ex["cpu"], "cpu_ratio_to_sgd": ex["cpu"] / sgd["cpu"],
                "ratio_exact_to_local": None if lo is None else ex["time"] / lo["time"],
                "collectives_per_step": ex["calls"], "bytes_per_step": ex["bytes"],
                "gather_ms_per_step": 1e3 * ex["gather_s"],
                "gather_skew_us": 1e6 * ex["skew_s"] if "skew_s" in ex else None,
                "gather_collective_us": 1e6 * ex["coll_s"] if "coll_s" in ex else None}

    rows = [row("SGD (plain DDP)", sgd), row("one bare all-gather, no step (the floor of a "
                                              "gather's cost)", out["bare"])]
    labels = {"gather": "floor: SGD + one gather (any gathering optimizer)",
              "groups": "floor: SGD on the loss the group methods are driven with (the "
                        "mean of the batch's group means + a tenth of the mean loss) + one "
                        "gather (sonx, sox, ooa; sonex, alexr2 before their 2nd forward)",
              "nograd": "floor: SGD + gather + a no-grad forward at a 2nd iterate "
                        "(MSVR: sonex, alexr2)",
              "graph": "floor: SGD + gather + forward/backward at a 2nd iterate "
                       "(STORM: ascdro; lower bound)"}
    rows += [row(label, out[f"floor/{e}"]) for e, label in labels.items()
             if f"floor/{e}" in out]
    for name in args.rows:
        lo, so = out[f"{name}/local"], out.get(f"{name}/solo")
        rows.append(row(name, out[f"{name}/exact"], lo, so))
        if f"{name}/hook" in out:
            rows.append(row(f"{name} (attach)", out[f"{name}/hook"], lo, so))
        if f"{name}/overlap" in out:
            rows.append(row(f"{name} (overlap=True: gather overlapped with the backward)",
                            out[f"{name}/overlap"], lo, so))
        if f"{name}/tensor" in out:
            rows.append(row(f"{name} (tensor code)", out[f"{name}/tensor"], lo, so))
    paired = []      # the overlapped gather against the blocking one, block by block
    for name in args.rows:
        if f"{name}/overlap" in out:
            ov, bl = out[f"{name}/overlap"], out[f"{name}/exact"]
            paired.append({
                "optimizer": name,
                "wall_ratio_per_block": [a / b for a, b in zip(ov["walls"], bl["walls"])],
                "cpu_ratio_per_block": [a / b for a, b in zip(ov["cpus"], bl["cpus"])],
                "gather_ms_per_step": [1e3 * ov["gather_s"], 1e3 * bl["gather_s"]]})
    meta = {"batch_per_rank": args.batch, "world": WORLD, "backend": "gloo",
            "model": f"MLP {args.d}-{args.hidden}-1 float32 ({n_params} parameters)",
            "ddp_allreduce_bytes_per_step": 4 * n_params, "steps": args.steps,
            "torch": torch.__version__, "load": os.getloadavg(),
            "note": "2 shared CPU cores, loaded machine"}
    write_results(out_dir, {"meta": meta, "rows": rows, "overlap": paired},
                  lambda: markdown(args, meta, rows, paired, sgd, solo_sgd))


def markdown(args, meta, rows, paired, sgd, solo_sgd):
    """The Markdown lines of ``results.md``."""
    n_params = args.d * args.hidden + 2 * args.hidden + 1
    md = [f"# DDP communication per step (`python benchmarks/torch_ddp_comm.py --batch "
          f"{args.batch} --steps {args.steps} --repeats {args.repeats} --hidden "
          f"{args.hidden}`)", "",
          f"{meta['model']}, {WORLD} gloo ranks x {args.batch} rows; DDP's own all-reduce: "
          f"{4 * n_params} bytes per step. Machine loaded (2 shared cores, load average "
          f"{meta['load'][0]:.1f} at the end): ratios only. Best and median wall time of "
          f"{args.repeats} interleaved blocks; CPU: rank 0's process time (median), the "
          "waits for the other rank excluded."]
    if solo_sgd is not None:
        md += ["", "One process (median wall, CPU in brackets): the same optimizer without DDP "
               "and without gathers (`process_group=False`, a model of its own) against SGD "
               "without DDP, timed while the other rank does the same: the algorithmic floor "
               "of the DDP ratio (what the optimizer computes, the loss's group means and any "
               "second forward included). DDP overhead = x (median) / one process: what DDP "
               "and the gathers add relative to plain DDP + SGD's own DDP cost (plain DDP + "
               f"SGD's step is {sgd['median'] / solo_sgd['median']:.2f}x one-process SGD's, "
               "median wall)."]
    md += ["", "| optimizer | ms / step (best) | x plain DDP+SGD (best) | x (median) | x (CPU) | "
           "x one process (CPU) | DDP overhead | x same optimizer without gather | optimizer "
           "collectives / step | gathered bytes / step | ms / step in the gathers (mean, "
           "waits included) | a gather: the ranks' arrival skew / the collective, us "
           "(median) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        loc = "-" if r["ratio_exact_to_local"] is None else f"{r['ratio_exact_to_local']:.2f}"
        one = "-" if r["one_process_ratio"] is None else (
            f"{r['one_process_ratio']:.2f} ({r['one_process_cpu_ratio']:.2f})")
        ovh = "-" if r["ddp_overhead_ratio"] is None else f"{r['ddp_overhead_ratio']:.2f}"
        md.append(f"| {r['optimizer']} | {r['ms_per_step']:.2f} | {r['ratio_to_sgd']:.2f} | "
                  f"{r['median_ratio_to_sgd']:.2f} | {r['cpu_ratio_to_sgd']:.2f} | {one} | "
                  f"{ovh} | {loc} | {r['collectives_per_step']:.2f} | "
                  f"{r['bytes_per_step']:.0f} | {r['gather_ms_per_step']:.3f} | "
                  + ("-" if r["gather_skew_us"] is None else
                     f"{r['gather_skew_us']:.0f} / {r['gather_collective_us']:.0f}") + " |")
    for r in paired:
        w, c = r["wall_ratio_per_block"], r["cpu_ratio_per_block"]
        md += ["", f"{r['optimizer']}: gather overlapped with the backward / waited for in "
               f"weights, per interleaved block: wall median {statistics.median(w):.3f} "
               f"(range {min(w):.2f}-{max(w):.2f}), CPU median {statistics.median(c):.3f}; "
               f"ms / step in the gathers (launch + wait) {r['gather_ms_per_step'][0]:.3f} "
               f"against {r['gather_ms_per_step'][1]:.3f}."]
    return md


if __name__ == "__main__":
    main()
