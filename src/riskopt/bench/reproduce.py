"""``riskopt bench reproduce [PAPER ...]``: the papers' experiments next to their claims.

For every experiment of a paper that runs here (:data:`EXPERIMENTS`: the paper, the figure or
table, the bundled spec, the paper's claim in its own words and how to check it), the report
puts our figure, the claim, what our results show and a verdict:

* **agrees** / **differs** -- from a check on our results (e.g. "Prospect has the lowest final
  suboptimality on 12 of 15 problems" against the claim that it converges fastest), with the
  reason of a difference where we know it (data substituted, sample size, ...);
* **not run** -- no results yet (``--run`` runs the spec, resumably; long runs can be split
  with repeated invocations).

Experiments that need their own training loop (neural networks, constrained learning; the
certification of the reference optima) run as scripts under ``benchmarks/`` instead of a spec;
their entries name the script and the results folder it writes, and their checks
(:mod:`riskopt.bench._script_checks`) read that folder's tables.

Results are looked up in ``RESULTS/<spec name>`` (default ``benchmarks/results``). A check
needs the results table (``results.parquet``), or, for older committed results, the
``selection.csv`` and the ``f*`` of ``metadata.json`` (final scores of the selected
configurations). Building the report never reruns a solver unless ``--run`` is given.

Examples
--------
>>> from riskopt.bench.reproduce import EXPERIMENTS, papers
>>> papers()
['prospect', 'sorel', 'splplus', 'scdro', 'sonex']
>>> sorted({e.spec for e in EXPERIMENTS if e.paper == "sorel" and not e.script})[:2]
['ood_adult', 'sorel_fig2']
>>> sorted({e.script for e in EXPERIMENTS if e.paper == "scdro" and e.script})  # doctest: +NORMALIZE_WHITESPACE
['benchmarks/exact_optima.py', 'benchmarks/kl_dro_cost.py', 'benchmarks/scdro_nonconvex.py',
 'benchmarks/scdro_warmstart.py']
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from .verdict import VERDICTS
from ._catalogue import (EXPERIMENTS, WHY, Experiment, check_ablation, check_best,  # noqa: F401
                         check_wider_range)

__all__ = ["EXPERIMENTS", "Experiment", "papers", "entries", "build", "check_best"]

PAPER_FILES = {
    "prospect": "prospect_dro_bias_variance_reduction.txt",
    "sorel": "sorel_spectral_risk.txt",
    "splplus": "splplus_cvar_prox_linear.txt",
    "scdro": "scdro_kl_constrained_dro.txt",
    "sonex": "sonex_alexr2_nonsmooth_fcco.txt",
}


def papers():
    return list(PAPER_FILES)


# ---------------------------------------------------------------------------- report
_RESULT_FILES = ("metadata.json", "results.json", "results.parquet", "results.csv", "cost.json")


def _spec_entry(e, root, run, jobs, say):
    """(spec shown, results folder, notes, done) of a spec-based experiment: its own folder,
    else the first reduced spec that has results (named as a stand-in), else -- with
    ``run`` -- the spec run now."""
    folder = root / e.spec
    if (folder / "metadata.json").exists():
        return e.spec, folder, e.notes, True
    if not run:
        for alt in e.fallbacks:
            if (root / alt / "metadata.json").exists():
                return alt, root / alt, (f"{e.notes} " if e.notes else "") + (
                    f"Stand-in: the reduced spec `{alt}` (its description says how); the full "
                    f"`{e.spec}` has not been run."), True
        return e.spec, folder, e.notes, False
    from .runner import run as run_spec

    say(f"running {e.spec} into {folder}")
    return e.spec, folder, e.notes, run_spec(e.spec, out=folder, jobs=jobs,
                                             progress=False).complete


def _script_entry(e, root, run, say):
    """(done, what to say when not done) of a script-based experiment; with ``run`` the
    script (found relative to the working directory, i.e. a checkout of the repository) is
    run with ``--out`` set to the experiment's results folder."""
    folder = root / e.spec
    if any((folder / f).exists() for f in _RESULT_FILES) or any(folder.glob("*/results.json")):
        return True, ""  # (a script run once per setting writes one sub-folder each)
    missing = f"no results (run `python {e.script}` in a checkout of the repository)"
    if not run:
        return False, missing
    if not Path(e.script).exists():
        say(f"cannot run {e.script}: not found from {Path.cwd()}")
        return False, missing
    say(f"running {e.script} into {folder}")
    proc = subprocess.run([sys.executable, e.script, "--out", str(folder)], check=False)
    if proc.returncode != 0:
        say(f"{e.script} exited with {proc.returncode}")
    return any((folder / f).exists() for f in _RESULT_FILES), missing


def entries(selected=None, results_root="benchmarks/results", run=False, jobs=None, echo=None):
    """One dict per experiment of the papers ``selected`` (default all): ``paper, item, spec``
    (the spec, its stand-in or the script), ``folder``, ``claim``, ``ours``, ``verdict``,
    ``notes``; with ``run`` what has no results is run first into ``results_root``."""
    say = echo or (lambda m: None)
    selected = list(selected or papers())
    unknown = [p for p in selected if p not in PAPER_FILES]
    if unknown:
        raise ValueError(f"unknown paper(s) {unknown}; choose from {papers()}")
    root = Path(results_root)
    out = []
    for paper in selected:
        for e in (e for e in EXPERIMENTS if e.paper == paper):
            if e.script:
                done, ours_missing = _script_entry(e, root, run, say)
                spec, folder, notes = e.script, root / e.spec, e.notes
            else:
                spec, folder, notes, done = _spec_entry(e, root, run, jobs, say)
                ours_missing = "no results"
            result = e.check(folder) if (done and e.check is not None) else None
            if not done:
                ours, verdict = ours_missing, "not run"
            elif result is None:
                ours, verdict = "see the figure", "not checked automatically"
            else:
                ours, verdict = result
            why = (e.why or WHY.get((paper, e.item), "")) \
                if verdict not in ("agrees", "not run") else ""
            out.append({"paper": paper, "item": e.item, "spec": spec, "folder": folder,
                        "done": done, "claim": e.claim, "ours": ours, "verdict": verdict,
                        "notes": notes, "why": why})
    return out


def build(selected=None, results_root="benchmarks/results", run=False, jobs=None,
          out=None, echo=None):
    """Build the reproduction report (Markdown text) for the papers ``selected`` (default
    all); with ``run`` the specs without results are run first into ``results_root``."""
    rows = entries(selected, results_root, run, jobs, echo)
    base = Path(out).parent if out else Path(results_root)
    sections = []
    for paper in list(selected or papers()):
        sections.append(f"## {paper} ({PAPER_FILES[paper]})\n")
        mine = [r for r in rows if r["paper"] == paper]
        if not mine:
            sections.append("No experiment of this paper runs through the benchmark runner "
                            "yet.\n")
        for r in mine:
            notes, folder = r["notes"], r["folder"]
            sections.append(f"### {r['item']} -- `{r['spec']}`\n\n- claim: {r['claim']}\n"
                            f"- ours: {r['ours']}\n- verdict: **{r['verdict']}**"
                            + (f" ({notes})" if notes else "") + "\n"
                            + (f"- why: {r['why']}\n" if r["why"] else ""))
            figs = sorted(folder.glob("*.png")) if r["done"] else []
            sections += [f"![{folder.name}/{p.name}]({os.path.relpath(p, base)})\n"
                         for p in figs[:2]]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in dict.fromkeys(
        [*VERDICTS, *(r["verdict"] for r in rows)])}
    head = ["# Reproduction report", "",
            "Built by `riskopt bench reproduce` from the results under "
            f"`{results_root}` (no solver was rerun unless `--run` was given).", "",
            "Verdicts (" + ", ".join(f"{k}: {v}" for k, v in counts.items() if v) + "). Each "
            "row tests the paper's claim (quoted) on the paper's metric, per method one value "
            "per seed (or fold), mean +- std: **agrees** when the paper's ordering holds beyond "
            "the noise (2 Welch standard errors of the difference, and the row's floor) on the "
            "share of problems the claim names; **differs** when a rival is ahead beyond the "
            "noise on so many problems that the share cannot be reached; **within noise** in "
            "between; **too few seeds** when a method has fewer than 3 values (no noise "
            "estimate). Rule: `riskopt.bench.verdict`; checks: `riskopt.bench._claims`.", "",
            "| paper | item | spec or script | verdict | ours |", "|---|---|---|---|---|"]
    cell = lambda t: str(t).replace("|", "\\|")  # noqa: E731 -- a pipe would end the cell
    head += [f"| {r['paper']} | {cell(r['item'])} | `{r['spec']}` | {r['verdict']} | "
             f"{cell(r['ours'])} |" for r in rows]
    return "\n".join(head) + "\n\n" + "\n".join(sections)
