"""The eager CPU host paths of the torch optimizers against their tensor code, piece by
piece, in one process (no collective): what each saves per call.

The pieces: the by-index merge of a gathered table (``_comm._merge_host`` against the
tensor merge of ``GuardMixin._gather_by_index``: 2 ranks x 4 groups, 4 columns, as SONEX's
under DDP) and OOA's batch and group step (``_updates_fcco.ooa_batch`` / ``ooa_update``: 4
groups, no parameters), and PG-SMD2's KL-ball projection against stop 39's code (its
Newton statistics by ``logsumexp``), and ASCDRO's batch statistics in a step without a
restart (the restart's estimators skipped on the host). (A host path for SCDRO's 0-d statistics was measured here too,
1.05x / 0.85x of its tensor code in two runs: no gain, not kept.) Each piece runs ``--calls`` times per
block, host and tensor code in alternating blocks (``--repeats`` each); reported: the
median CPU microseconds per call of each and their ratio. One thread; the machine's load
moves the microseconds, less the ratio (the blocks interleave).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/torch_host_paths.py [--calls 2000] [--repeats 7]
        [--out DIR]

Output: ``benchmarks/results/torch_host_paths/`` (JSON and Markdown).
"""
import argparse
import math
import os
import statistics
import time
from pathlib import Path

import torch

from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.torch.optim import _comm, _updates, _updates_fcco, _updates_kl

OUT = Path(__file__).resolve().parent / "results" / "torch_host_paths"


def _tensor_merge(table, sizes, off, b, k):
    """The tensor code of ``GuardMixin._gather_by_index``'s merge (as on NCCL)."""
    gi, gc = table[:, 0].to(torch.int64), table[:, 1]
    I, inv = torch.unique(gi, return_inverse=True)
    C = torch.zeros(I.numel(), dtype=torch.float64).index_add_(0, inv, gc)
    merged = [torch.zeros_like(C).index_add_(0, inv, gc * table[:, 2 + j]) / C
              for j in range(k)]
    loc = slice(off, off + b)
    return I, merged, (inv[loc], gc[loc] / C[inv[loc]] * len(sizes))


def _kl_ball_log_stop39(logp, rho):
    """Stop 39's eager KL-ball projection (each Newton step's statistics by ``logsumexp``,
    about 11 tensor ops), kept as the reference of the current one."""
    d = (logp - logp.max()).double()
    logn, tol = math.log(logp.numel()), 1e-13 * max(1.0, rho)

    def stats(a):
        z = d * a
        lse = torch.logsumexp(z, 0)
        q = torch.exp(z - lse)
        mu = (q * d).sum()
        lse, mu, var = torch.stack([lse, mu, (q * (d - mu) ** 2).sum()]).tolist()
        return a * mu - (lse - logn), var, lse

    kl, var1, lse1 = stats(1.0)
    if kl <= rho:
        return d - lse1
    a1 = 1.0 - math.log(kl / rho) * kl / (var1 if var1 > 0 else 1.0)
    var0 = float(d.var(unbiased=False))
    a = a1 if var1 > 0 and 0.0 < a1 < 1.0 else (
        min(math.sqrt(2.0 * rho / var0), 0.5) if var0 > 0 else 0.5)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        kl, var, lse = stats(a)
        err = kl - rho
        done = abs(err) <= tol
        if not done:
            lo, hi = (lo, a) if err > 0 else (a, hi)
        if done or hi - lo <= 4e-16 * hi:
            break
        curv = a * var
        step = (a - math.log(kl / rho) * kl / curv if kl > 0 else a - err / curv
                ) if curv > 0 else math.nan
        a = step if lo < step < hi else 0.5 * (lo + hi)
    return d * a - lse


def pieces():
    """``name -> (host call, tensor call)``."""
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([0, 1, 2, 3, 1, 2, 3, 0], dtype=torch.float64)
    table = torch.stack([ids, torch.randint(20, 40, (8,), generator=g).double(),
                         torch.rand(8, generator=g, dtype=torch.float64),
                         torch.rand(8, generator=g, dtype=torch.float64)], 1)
    merge = (lambda: _comm._merge_host(table, [4, 4], 0, 4, 2, None, None, None),
             lambda: _tensor_merge(table, [4, 4], 0, 4, 2))
    p_tab = torch.full((4,), 0.25, dtype=torch.float64)
    I = torch.arange(4)
    L = torch.rand(4, generator=g, dtype=torch.float64)

    def ooa():
        _updates_fcco.ooa_batch(p_tab, I, L, 0.5, 1.0)
        _updates_fcco.ooa_update([], p_tab, I, L, 0.1, 0.5)
    # PG-SMD2's dual table after a projection and one batch's ascent step (n = 4096, the
    # DDP benchmark's dataset), projected again
    n = 4096
    logp = _kl_ball_log_stop39(3.0 * torch.randn(n, generator=g, dtype=torch.float64), 0.5)
    logp.index_add_(0, torch.randint(0, n, (512,), generator=g),
                    0.05 * n / 512 * torch.rand(512, generator=g, dtype=torch.float64))
    kl_ball = (lambda: _updates_kl.kl_ball_log(logp, 0.5),
               lambda: _kl_ball_log_stop39(logp, 0.5))
    # ASCDRO's batch statistics in a step without a restart (2 ranks x 256 losses, float64)
    l64 = torch.rand(512, generator=g, dtype=torch.float64)
    lp64 = l64 + 0.01 * torch.rand(512, generator=g, dtype=torch.float64)
    one = torch.ones((), dtype=torch.float64)
    asc_args = (l64, lp64, one, one, one.clone(), -one, torch.zeros((), dtype=torch.float64),
                512, math.log(512), 0.5, True, 0.5, 0.0)
    assert not bool(_updates_kl.ascdro_batch(*asc_args)[6])        # (no restart)
    asc = lambda: _updates_kl.ascdro_batch(*asc_args)           # noqa: E731
    return {"by-index merge (SONEX, SONX, SOX, ALEXR2, OOA under DDP)": merge,
            "ASCDRO's batch statistics, no restart (host: the restart's estimators skipped "
            "after a host read of the flag)": (asc, asc),
            "OOA batch + group step": (ooa, ooa),
            "PG-SMD2's KL-ball projection, n = 4096 (the 'tensor code' column: stop 39's "
            "statistics by logsumexp; calls / 10)": kl_ball}


def _block(fn, calls, host):
    _updates.HOST = host
    try:
        c0 = time.process_time()
        for _ in range(calls):
            fn()
        return (time.process_time() - c0) / calls
    finally:
        _updates.HOST = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name, (host, tensor) in pieces().items():
        for fn, h in ((host, True), (tensor, False)):
            _block(fn, 50, h)                       # warm-up
        t_host, t_tensor = [], []
        calls = args.calls // 10 if "calls / 10" in name else args.calls
        for _ in range(args.repeats):
            t_host.append(_block(host, calls, True))
            t_tensor.append(_block(tensor, calls, False))
        h, t = statistics.median(t_host), statistics.median(t_tensor)
        rows.append({"piece": name, "host_us": 1e6 * h, "tensor_us": 1e6 * t,
                     "ratio": h / t})
    meta = {"calls": args.calls, "repeats": args.repeats, "torch": torch.__version__,
            "load": os.getloadavg()}
    out = Path(args.out)
    atomic_write_json(out / "results.json", {"meta": meta, "rows": rows})
    md = [f"# Host paths against the tensor code (`python benchmarks/torch_host_paths.py "
          f"--calls {args.calls} --repeats {args.repeats}`)", "",
          f"CPU microseconds per call, median of {args.repeats} interleaved blocks; one "
          f"thread; load average {meta['load'][0]:.1f} at the end.", "",
          "| piece | host (us) | tensor code (us) | host / tensor |", "|---|---|---|---|"]
    md += [f"| {r['piece']} | {r['host_us']:.1f} | {r['tensor_us']:.1f} | {r['ratio']:.2f} |"
           for r in rows]
    atomic_write_text(out / "results.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
