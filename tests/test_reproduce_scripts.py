"""`riskopt bench reproduce`: the checks of the script-based experiments, SPL+, the ablations,
SCDRO Tables 2-3 and Prospect Fig. 13; each reads a small fixture folder laid out like the real
results, and its verdict follows the numbers (both ways); the report names the script; `--run`
runs a script that is missing its results."""
import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

import riskopt.bench.reproduce as rep
from riskopt.bench import _script_checks as sc

REPO = Path(__file__).resolve().parents[1]


def _curves(train, test, worst=0.5, epochs=3):
    return [{"epoch": e, "train_accuracy": train * e / epochs, "test_accuracy": test * e / epochs,
             "test_worst_class_accuracy": worst, "kl_objective": 1.0 / e}
            for e in range(1, epochs + 1)]


def write_scdro(folder, acc):
    folder.mkdir(parents=True)
    res = {m: {"lr": 0.1, "curves": [_curves(tr, te), _curves(tr, te)]}
           for m, (tr, te) in acc.items()}
    (folder / "results.json").write_text(json.dumps({"results": res}))


def test_scdro_nonconvex_best_on_train_and_test_or_differs(tmp_path):
    write_scdro(tmp_path / "a", {"scdro": (0.99, 0.9), "fastdro": (0.98, 0.88)})
    ours, verdict = sc.check_scdro_nonconvex(tmp_path / "a")
    assert verdict == "agrees" and "scdro 0.990 / 0.900" in ours
    write_scdro(tmp_path / "b", {"scdro": (0.99, 0.87), "fastdro": (0.98, 0.88)})
    ours, verdict = sc.check_scdro_nonconvex(tmp_path / "b")
    assert verdict == "differs" and "best test: fastdro" in ours
    assert sc.check_scdro_nonconvex(tmp_path / "missing") is None


def _runs(objective, stage_of_config, extra_cols, metric, last_col="epoch"):
    """Rows of a tuning/final layout: ``objective[(dataset, method, config)] = value`` at the
    last epoch (the first epoch is 10x worse); the tuning stage has seed 0, the final one
    seeds 1 and 2 of the selected configs."""
    rows = []
    for (data, method, cfg), value in objective.items():
        stages = [("tuning", [0])] + ([("final", [1, 2])] if stage_of_config[cfg] else [])
        for stage, seeds in stages:
            for seed in seeds:
                for ep, v in ((0, 10 * value), (1, value + 1e-3 * seed)):
                    rows.append({"dataset": data, "method": method, **extra_cols(cfg),
                                 "seed": seed, last_col: ep, metric: v, "stage": stage})
    return pd.DataFrame(rows)


def test_group_dro_mlp_uses_the_selected_settings_final_epoch(tmp_path):
    obj = {("adult", "sonex", "a"): 0.30, ("adult", "sonex", "b"): 0.20,   # b: not selected
           ("adult", "sonx", "c"): 0.31, ("adult", "ooa", "d"): 0.305,
           ("adult", "erm", "e"): 0.10}                                   # ERM is not a rival
    sel = {"a": True, "b": False, "c": True, "d": True, "e": True}
    df = _runs(obj, sel, lambda c: {"config": c}, "train_objective")
    (tmp_path / "f").mkdir()
    df.to_parquet(tmp_path / "f" / "results.parquet")
    ours, verdict = sc.check_group_dro_mlp(tmp_path / "f")
    assert verdict == "agrees", ours
    assert "adult: sonex 0.3010 < ooa 0.3060 < sonx 0.3110" in ours  # mean of seeds 0, 1, 2
    obj[("adult", "ooa", "d")] = 0.29
    df = _runs(obj, sel, lambda c: {"config": c}, "train_objective")
    df.to_parquet(tmp_path / "f" / "results.parquet")
    assert sc.check_group_dro_mlp(tmp_path / "f")[1] == "differs"


def test_auc_fairness_needs_every_dataset_and_feasible_constraints(tmp_path):
    obj = {("adult", "alexr2", 1): 0.90, ("adult", "sox", 2): 0.89,
           ("compas", "alexr2", 1): 0.71, ("compas", "sox", 2): 0.72}
    sel = {1: True, 2: True}
    df = _runs(obj, sel, lambda c: {"rho": float(c), "lr": 0.01}, "test_auc")
    df["worst_test"] = -0.001
    (tmp_path / "f").mkdir()
    df.to_parquet(tmp_path / "f" / "results.parquet")
    ours, verdict = sc.check_auc_fairness(tmp_path / "f")
    assert verdict == "differs" and "ALEXR2 highest on 1 of 2 data sets" in ours
    df.loc[(df.dataset == "compas") & (df.method == "alexr2"), "test_auc"] += 0.02
    df.to_parquet(tmp_path / "f" / "results.parquet")
    assert sc.check_auc_fairness(tmp_path / "f")[1] == "agrees"
    df.loc[df.method == "alexr2", "worst_test"] = 0.01  # ALEXR2 violates its constraints
    df.to_parquet(tmp_path / "f" / "results.parquet")
    ours, verdict = sc.check_auc_fairness(tmp_path / "f")
    assert verdict == "differs" and "its constraints met on 0 of 2" in ours


def test_continual_selects_like_the_script(tmp_path):
    rows = []
    # sonex: rho 1 gains most but is infeasible (0.05 > 0.02): rho 10 is selected
    for method, rho, gain, worst in (("sonex", 1, 0.9, 0.05), ("sonex", 10, 0.7, 0.01),
                                     ("sox", 10, 0.65, 0.015)):
        for seed in (0, 1):
            for p in (0, 5):
                rows.append({"method": method, "rho": rho, "lr": 0.01, "seed": seed, "pass": p,
                             "target_gain": gain * p / 5, "worst_constraint": worst})
    (tmp_path / "f").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "f" / "results.parquet")
    ours, verdict = sc.check_continual(tmp_path / "f")
    assert verdict == "agrees" and "sonex 0.7000" in ours and "sox 0.6500" in ours


def write_fstar(folder, excess):
    folder.mkdir(parents=True)
    rows = [{"results": "r", "dataset": f"d{i}", "objective": "cvar:0.1",
             "fstar_minus_bound_rel": e, "newton_rel_gap": e, "certified": e < 1e-10,
             "skipped": ""} for i, e in enumerate(excess)]
    rows.append({"results": "r", "dataset": "k", "objective": "mean", "skipped": "K > 1"})
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)


def test_fstar_agrees_only_when_every_reference_is_exact_to_tol(tmp_path):
    write_fstar(tmp_path / "a", [1e-12, 3e-9])
    ours, verdict = sc.check_fstar(tmp_path / "a")
    assert verdict == "agrees" and "2 problems" in ours and "1 skipped" in ours
    write_fstar(tmp_path / "b", [1e-12, 2e-7])
    ours, verdict = sc.check_fstar(tmp_path / "b")
    assert verdict == "differs" and "r d1 cvar:0.1 2.0e-07" in ours


def test_every_script_entry_names_a_script_of_the_repository():
    scripts = [e for e in rep.EXPERIMENTS if e.script]
    assert {e.spec for e in scripts} >= {"scdro_nonconvex", "fcco_group_dro_mlp",
                                         "fcco_auc_fairness", "fcco_continual_digits",
                                         "fstar_certified", "kl_dro_cost"}
    for e in scripts:
        assert (REPO / e.script).is_file(), e.script
        assert "--out" in (REPO / e.script).read_text(), f"{e.script} takes no --out"


def test_report_row_names_the_script_and_says_how_to_run_it(tmp_path):
    write_scdro(tmp_path / "scdro_nonconvex", {"scdro": (0.99, 0.9), "fastdro": (0.98, 0.8)})
    text = rep.build(["scdro", "sonex"], results_root=tmp_path)
    assert "| scdro | Fig. 2 / 4 (non-convex) | `benchmarks/scdro_nonconvex.py` | agrees |" \
        in text
    row = next(l for l in text.splitlines() if "fcco_auc_fairness.py` |" in l)
    assert "| not run |" in row and "run `python benchmarks/fcco_auc_fairness.py`" in row


def test_run_runs_a_script_without_results(tmp_path, monkeypatch):
    script = tmp_path / "make_fstar.py"
    script.write_text(
        "import sys, pathlib, pandas as pd\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1]); out.mkdir(parents=True)\n"
        "pd.DataFrame([{'results': 'r', 'dataset': 'd', 'objective': 'cvar:0.5',\n"
        "  'fstar_minus_bound_rel': 1e-12, 'newton_rel_gap': 1e-12, 'certified': True,\n"
        "  'skipped': ''}]).to_csv(out / 'results.csv', index=False)\n")
    exp = next(e for e in rep.EXPERIMENTS if e.spec == "fstar_certified")
    monkeypatch.setattr(rep, "EXPERIMENTS", [dataclasses.replace(exp, script=str(script))])
    said = []
    text = rep.build([exp.paper], results_root=tmp_path / "root", run=True, echo=said.append)
    assert any("running" in m for m in said)
    row = next(l for l in text.splitlines() if str(script) in l and l.startswith("|"))
    assert "| agrees |" in row and "1 problems of 1 results folders" in row


def test_splplus_wider_range_on_smooth_losses_only(tmp_path):
    rows = []
    for label, widths in (("squared / normal", {"splplus": 2.0, "spl": 1.0, "sgm": 0.5}),
                          ("logistic / normal", {"splplus": 1.5, "spl": 1.5, "sgm": None}),
                          ("absolute / normal", {"splplus": 0.0, "spl": 0.0, "sgm": 3.0})):
        for m, w in widths.items():
            rows.append({"problem_label": label, "method": m, "width_decades_vs_all": w,
                         "lr1_good": m == "splplus"})
    (tmp_path / "f").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "f" / "summary.csv", index=False)
    check = rep.check_wider_range()
    ours, verdict = check(tmp_path / "f")
    # the absolute loss is left out; SGM without a good range counts as 0 decades
    assert verdict == "agrees" and "SPL+ wider than SGM on 2 of 2 problems" in ours
    assert "lr = 1 good for SPL+ on 2 of 2" in ours
    rows[0]["width_decades_vs_all"] = 0.5
    rows[3]["width_decades_vs_all"] = 0.0
    pd.DataFrame(rows).to_csv(tmp_path / "f" / "summary.csv", index=False)
    ours, verdict = check(tmp_path / "f")
    assert verdict == "differs" and "on 0 of 2 problems (2 ties)" in ours


def test_ablation_stable_families_and_adam(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()

    def write(scores):
        pd.DataFrame([{"dataset": "adult", "objective": "g", "solver": k, "score": v,
                       "selected": True} for k, v in scores.items()]).to_csv(
            folder / "selection.csv", index=False)
        (folder / "metadata.json").write_text(json.dumps(
            {"f_star": [{"dataset": "adult", "objective": "g", "f_star": 1.0}]}))

    write({"sonex-beta0.1": 1.010, "sonex-beta1": 1.015, "alexr2-theta1": 1.02,
           "alexr2-theta0.5": 1.03, "sonex-adam": 1.005})
    ours, verdict = rep.check_ablation()(folder)
    assert verdict == "agrees" and "sonex-beta*: 0.01-0.015 (1.50x)" in ours
    write({"sonex-beta0.1": 1.010, "sonex-beta1": 1.05, "sonex-adam": 1.005})  # 5x apart
    assert rep.check_ablation()(folder)[1] == "differs"
    write({"sonex-beta0.1": 1.010, "sonex-beta1": 1.015, "sonex-adam": 1.02})  # Adam worse
    assert rep.check_ablation()(folder)[1] == "differs"


def test_scdro_tables_compare_kl_constrained_with_the_other_objectives(tmp_path):
    def write(spec, rows):
        (tmp_path / spec).mkdir(exist_ok=True)
        df = pd.DataFrame([{"dataset": d, "objective": o, "solver": s, "seed": seed,
                            "update": u, "selected": sel, "m_test_accuracy": acc * u / 2}
                           for d, o, s, sel, acc in rows for seed in (0, 1) for u in (1, 2)])
        df.to_parquet(tmp_path / spec / "results.parquet")

    write("scdro_convex", [("a", "kl", "rscdro", True, 0.9), ("a", "kl", "spd", True, 0.99),
                           ("a", "kl", "rascdro", False, 0.98)])   # not selected: left out
    write("scdro_compare_klreg", [("a", "klreg", "recover", True, 0.85)])
    write("scdro_compare_spectral", [("a", "mean", "sgd_momentum", True, 0.8)])
    ours, verdict = sc.check_scdro_tables(tmp_path / "scdro_compare_klreg")
    # SPD solves the same objective but is not the paper's method: it does not count
    assert verdict == "agrees" and "a: KL-constrained (rscdro) 90.00 % vs best other" in ours
    write("scdro_compare_spectral", [("a", "mean", "sgd_momentum", True, 0.95)])
    assert sc.check_scdro_tables(tmp_path / "scdro_compare_klreg")[1] == "differs"


def test_comparable_variants_and_the_worse_one(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()

    def write(gaps):
        rows = [{"dataset": d, "objective": "cvar", "solver": k, "score": 1.0 + v,
                 "selected": True} for d, per in gaps.items() for k, v in per.items()]
        pd.DataFrame(rows).to_csv(folder / "selection.csv", index=False)
        (folder / "metadata.json").write_text(json.dumps(
            {"f_star": [{"dataset": d, "objective": "cvar", "f_star": 1.0} for d in gaps]}))

    check = rep.check_comparable("prospect", ("prospect_moreau",), "saddlesaga_equal")
    write({"a": {"prospect": 1e-8, "prospect_moreau": 5e-8, "saddlesaga_equal": 1e-3},
           "b": {"prospect": 1e-12, "prospect_moreau": 1e-10, "saddlesaga_equal": 1e-4}})
    ours, verdict = check(folder)
    assert verdict == "agrees" and "prospect_moreau on 2 of 2" in ours  # b: both below 1e-9
    write({"a": {"prospect": 1e-8, "prospect_moreau": 1e-5, "saddlesaga_equal": 1e-3},
           "b": {"prospect": 1e-8, "prospect_moreau": 1e-6, "saddlesaga_equal": 1e-4}})
    assert check(folder)[1] == "differs"


def test_kl_cost_gap_grows_with_n(tmp_path):
    def write(pg_big):
        rows = [{"solver": s, "n": n, "seconds_per_iteration": v}
                for s, n, v in (("scdro", 100, 1e-5), ("scdro", 10000, 2e-5),
                                ("pgsmd2", 100, 1e-4), ("pgsmd2", 10000, pg_big))]
        (tmp_path / "cost.json").write_text(json.dumps({"rows": rows}))

    write(1e-2)  # PG-SMD2 grows 100x, SCDRO 2x
    ours, verdict = sc.check_kl_cost(tmp_path)
    assert verdict == "agrees" and "pgsmd2 / scdro at n = 10,000: 500x" in ours
    write(2e-4)  # both grow 2x
    assert sc.check_kl_cost(tmp_path)[1] == "differs"
