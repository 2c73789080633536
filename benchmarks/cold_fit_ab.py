"""The cold first fit of two checkouts side by side (issue 29): ``first_minutes.py``'s first
fit (a fresh process, an empty ``NUMBA_CACHE_DIR``, the default ``RiskClassifier()`` on a
5,000 x 20 synthetic binary problem; goal <= 3 s), the versions alternating round by round,
so that a load that drifts over minutes hits both alike.

    python benchmarks/cold_fit_ab.py --before /tmp/base/src [--after src] [--rounds 5]
                                     [--out DIR]

Reports per version the fit's wall and CPU seconds (median, minimum, maximum, every round),
the import time, the riskopt kernels compiled and the CPU each took (numba compile events,
outermost only, of the first round), and after / before of the medians. Writes
``results.json`` and ``results.md`` to ``--out`` when given.
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from first_minutes import _first_fit, write_results  # noqa: E402


def _summary(runs):
    out = {}
    for k in ("fit_wall", "fit_cpu", "import_wall", "import_cpu"):
        v = [r[k] for r in runs]
        out[k] = {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}
    return out


def _markdown(res):
    lines = ["# Cold first fit, before / after in alternation (issue 29; goal <= 3 s)", "",
             f"Load average at the start / end: {res['load_average'][0]} / "
             f"{res['load_average'][1]} (a shared machine: the wall time is the goal's, the "
             "CPU time the steadier one). Each round runs every version once, in a fresh "
             "process with an empty numba cache.", "", "Command: `" + res["command"] + "`", "",
             "| version | fit wall s median (min-max) | fit CPU s median (min-max) | "
             "imports CPU s | kernels compiled | solver, iterations |",
             "|---|---|---|---|---|---|"]
    for v, r in res["versions"].items():
        s = r["summary"]
        first = r["runs"][0]
        lines.append(
            f"| {v} | {s['fit_wall']['median']:.2f} ({s['fit_wall']['min']:.2f}-"
            f"{s['fit_wall']['max']:.2f}) | {s['fit_cpu']['median']:.2f} "
            f"({s['fit_cpu']['min']:.2f}-{s['fit_cpu']['max']:.2f}) | "
            f"{s['import_cpu']['median']:.2f} | {first['kernels_compiled']} | "
            f"{first['solver']}, {first['n_iter']} |")
    if len(res["versions"]) == 2:
        (a, ra), (b, rb) = list(res["versions"].items())
        lines += ["", "after / before (medians): wall "
                  f"{rb['summary']['fit_wall']['median'] / ra['summary']['fit_wall']['median']:.3f}"
                  f", CPU {rb['summary']['fit_cpu']['median'] / ra['summary']['fit_cpu']['median']:.3f}"]
    lines += ["", "Every round (fit wall / CPU s):", ""]
    for v, r in res["versions"].items():
        lines.append(f"- {v}: " + ", ".join(f"{x['fit_wall']:.2f} / {x['fit_cpu']:.2f}"
                                            for x in r["runs"]))
    lines += ["", "Kernels compiled in the first round (outermost compile, CPU s):", ""]
    for v, r in res["versions"].items():
        ks = r["runs"][0].get("kernels")
        if ks is None:
            lines.append(f"- {v}: (names not recorded by this version's listener)")
        else:
            lines.append(f"- {v}: " + ", ".join(f"{n} {c:.2f}" for n, c in ks) +
                         f" (sum {sum(c for _, c in ks):.2f})")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="src folder of the older checkout")
    ap.add_argument("--before-label", default="before")
    ap.add_argument("--after", default=str(HERE.parent.parent / "src"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    versions = {args.before_label: args.before, "after": args.after}
    res = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
           "versions": {v: {"src": str(s), "runs": []} for v, s in versions.items()}}
    load0 = os.getloadavg()[0]
    for i in range(args.rounds):
        order = list(versions.items())
        if i % 2:  # who goes first alternates too
            order.reverse()
        for v, src in order:
            r = _first_fit(src)
            res["versions"][v]["runs"].append(r)
            print(f"round {i} {v}: fit {r['fit_wall']:.2f} s wall / {r['fit_cpu']:.2f} s CPU, "
                  f"{r['kernels_compiled']} kernels", flush=True)
    for v in versions:
        res["versions"][v]["summary"] = _summary(res["versions"][v]["runs"])
    res["load_average"] = [round(load0, 1), round(os.getloadavg()[0], 1)]
    if args.out:                       # the data first: a formatting error keeps them
        write_results(args.out, res, lambda: _markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()
