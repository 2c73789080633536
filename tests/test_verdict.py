"""The verdict rule of the reproduction report (`riskopt.bench.verdict`) and the claim checks
built on it (`riskopt.bench._claims`), on fixtures: agrees, within noise, differs, too few
seeds -- each verdict follows the numbers both ways."""
import numpy as np
import pandas as pd
import pytest

from riskopt.bench import _claims as cl
from riskopt.bench.verdict import Stat, aggregate, compare, outcome


def test_compare_uses_the_welch_standard_error_of_the_difference():
    a = Stat.of([1.0, 1.1, 0.9])                    # mean 1, std 0.1
    # the margin is 2 * sqrt(0.01/3 + 0.01/3) = 0.163: a shift of 0.2 is beyond, 0.1 is not
    assert compare(a, Stat.of([1.2, 1.3, 1.1])) == "better"
    assert compare(Stat.of([1.2, 1.3, 1.1]), a) == "worse"
    assert compare(a, Stat.of([1.1, 1.2, 1.0])) == "tie"
    # the same means with a larger spread: a tie
    assert compare(Stat.of([1.0, 1.5, 0.5]), Stat.of([1.2, 1.7, 0.7])) == "tie"
    # higher is better (accuracies), and the absolute floor
    assert compare(Stat.of([0.9] * 3), Stat.of([0.8] * 3), higher_better=True) == "better"
    assert compare(Stat.of([0.9] * 3), Stat.of([0.8995] * 3), higher_better=True,
                   floor=1e-3) == "tie"


def test_compare_on_the_log_scale_ties_below_tiny_and_diverged_loses():
    a, b = Stat.of([1e-6, 2e-6, 1.5e-6]), Stat.of([1e-4, 2e-4, 1.5e-4])
    assert compare(a, b, log=True) == "better"
    # both at the optimum to 1e-9: a tie, however many decades apart
    assert compare(Stat.of([1e-14] * 3), Stat.of([1e-10] * 3), log=True, tiny=1e-9) == "tie"
    assert compare(Stat.of([1e-14] * 3), Stat.of([1e-8] * 3), log=True, tiny=1e-9) == "better"
    assert compare(Stat.of([np.inf, 1, 1]), Stat.of([5.0] * 3)) == "worse"
    assert compare(Stat.of([np.nan] * 3), Stat.of([np.inf] * 3)) == "tie"


@pytest.mark.parametrize("rival, ties_ok, expected", [
    ([2.0, 2.1, 1.9], False, "agrees"),          # ahead beyond the noise
    ([1.05, 1.15, 0.95], False, "within noise"),  # ahead, not beyond the noise
    ([1.05, 1.15, 0.95], True, "agrees"),         # "equal or faster": a tie agrees
    ([0.5, 0.6, 0.4], False, "differs"),          # the rival ahead beyond the noise
    ([0.5, 0.6, 0.4], True, "differs"),
    ([2.0, 2.1], False, "too few seeds"),         # 2 values: no noise estimate
])
def test_outcome_fixtures(rival, ties_ok, expected):
    stats = {"ours": Stat.of([1.0, 1.1, 0.9]), "rival": Stat.of(rival)}
    assert outcome(stats, "ours", ties_ok=ties_ok) == expected


def test_outcome_takes_the_best_of_a_group_and_every_rival():
    stats = {"sorel": Stat.of([5.0, 5.1, 4.9]), "sorel_minibatch": Stat.of([1.0, 1.1, 0.9]),
             "sgd": Stat.of([3.0, 3.1, 2.9]), "prospect": Stat.of([1.0, 1.05, 0.95])}
    assert outcome(stats, ("sorel", "sorel_minibatch")) == "within noise"   # prospect ties
    assert outcome(stats, ("sorel", "sorel_minibatch"), rivals=["sgd"]) == "agrees"
    assert outcome(stats, "sorel") == "differs"
    assert outcome({"sgd": stats["sgd"]}, "sorel") is None


def test_aggregate_against_the_share_the_claim_names():
    assert aggregate(["agrees"] * 4) == "agrees"
    assert aggregate(["agrees"] * 3 + ["within noise"]) == "within noise"
    assert aggregate(["agrees"] * 3 + ["differs"]) == "differs"
    # "nearly all" (90 %) of 10: one differing problem is allowed, two are not
    assert aggregate(["agrees"] * 9 + ["differs"], share=0.9) == "agrees"
    assert aggregate(["agrees"] * 8 + ["differs"] * 2, share=0.9) == "differs"
    assert aggregate(["agrees"] * 8 + ["within noise", "differs"], share=0.9) == "within noise"
    # "most": half
    assert aggregate(["agrees", "differs"], share=0.5) == "agrees"
    assert aggregate(["agrees", "too few seeds"]) == "too few seeds"
    assert aggregate([None]) is None


def write_runs(folder, gaps, seeds=(0, 1, 2), col="suboptimality", extra=None):
    """A results.parquet: ``gaps[(dataset, solver)] = [final value per seed]`` (the first
    recorded point 10x worse), every run selected."""
    rows = []
    for (d, s), per_seed in gaps.items():
        for seed, v in zip(seeds, per_seed):
            for u, x in ((0, 10 * v), (1, v)):
                rows.append({"dataset": d, "objective": "cvar:0.5", "solver": s, "seed": seed,
                             "config": "lr=0.1", "update": u, "passes": 10.0 * u,
                             "selected": True, col: x, **(extra or {})})
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(folder / "results.parquet")


def test_check_best_agrees_within_noise_and_differs(tmp_path):
    check = cl.check_best("prospect", ["prospect", "lsvrg"])
    write_runs(tmp_path / "a", {("yacht", "prospect"): [1e-8, 2e-8, 1.5e-8],
                                ("yacht", "lsvrg"): [1e-5, 2e-5, 1.5e-5]})
    ours, verdict = check(tmp_path / "a")
    assert verdict == "agrees" and "seeds 0,1,2" in ours and "1 agree" in ours
    write_runs(tmp_path / "b", {("yacht", "prospect"): [1e-8, 1e-6, 1e-7],
                                ("yacht", "lsvrg"): [2e-7, 3e-7, 1e-7]})
    assert check(tmp_path / "b")[1] == "within noise"
    # "equal or faster": the tie agrees
    assert cl.check_best("prospect", ["prospect", "lsvrg"], ties_ok=True)(
        tmp_path / "b")[1] == "agrees"
    write_runs(tmp_path / "c", {("yacht", "prospect"): [1e-5, 2e-5, 1.5e-5],
                                ("yacht", "lsvrg"): [1e-8, 2e-8, 1.5e-8]})
    ours, verdict = check(tmp_path / "c")
    assert verdict == "differs" and "yacht cvar:0.5: prospect 1e-4.84" in ours
    write_runs(tmp_path / "d", {("yacht", "prospect"): [1e-8], ("yacht", "lsvrg"): [1e-5]},
               seeds=(0,))
    ours, verdict = check(tmp_path / "d")
    assert verdict == "too few seeds" and "would read 'agrees'" in ours


def test_check_passes_to_a_fixed_accuracy(tmp_path):
    def write(passes):
        rows = []
        for s, per_seed in passes.items():
            for seed, p in enumerate(per_seed):
                for q in range(0, 60, 5):
                    rows.append({"dataset": "yacht", "objective": "cvar:0.5", "solver": s,
                                 "seed": seed, "passes": float(q), "selected": True,
                                 "suboptimality": 1e-3 if q < p else 1e-8})
        (tmp_path / "f").mkdir(exist_ok=True)
        pd.DataFrame(rows).to_parquet(tmp_path / "f" / "results.parquet")

    check = cl.check_passes_to("prospect", ("prospect_moreau",), "saddlesaga_equal")
    write({"prospect": [20, 20, 25], "prospect_moreau": [20, 25, 25],
           "saddlesaga_equal": [50, 55, 50]})
    ours, verdict = check(tmp_path / "f")
    assert verdict == "agrees" and "passes to a relative suboptimality of 1e-06" in ours
    # all final gaps below 1e-9 would tie; passes to 1e-6 tell the moreau variant 2x slower
    write({"prospect": [20, 20, 25], "prospect_moreau": [45, 45, 50],
           "saddlesaga_equal": [50, 55, 50]})
    assert check(tmp_path / "f")[1] == "differs"
    write({"prospect": [20, 20, 25], "prospect_moreau": [20, 25, 25],
           "saddlesaga_equal": [20, 25, 20]})
    assert check(tmp_path / "f")[1] == "within noise"


def write_exact(folder, group, metric, per_fold):
    rows = [{"group": group, "dataset": f"fold{k}", "objective": o, "n_test": 1000, metric: v}
            for o, vals in per_fold.items() for k, v in enumerate(vals)]
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)


def test_fairness_at_the_exact_optima_is_paired_over_folds(tmp_path):
    check = cl.check_fairness_exact("law", "test_smd:race", {"cvar": 25.0}, signed=True)
    # the folds differ a lot, the improvement in each is steady: agrees (paired)
    write_exact(tmp_path, "law", "test_smd:race",
                {"mean": [0.05, 0.08, 0.11, 0.06, 0.09],
                 "cvar:0.05": [0.04, 0.07, 0.10, 0.05, 0.08]})
    ours, verdict = check(tmp_path)
    assert verdict == "agrees" and "paper +25.0 %" in ours and "signed" in ours
    write_exact(tmp_path, "law", "test_smd:race",
                {"mean": [0.05, 0.08, 0.11, 0.06, 0.09],
                 "cvar:0.05": [0.06, 0.07, 0.10, 0.07, 0.08]})
    assert check(tmp_path)[1] == "within noise"
    # signed values: the verdict is on the absolute metric
    write_exact(tmp_path, "law", "test_smd:race",
                {"mean": [-0.05, -0.08, -0.11, -0.06, -0.09],
                 "cvar:0.05": [-0.06, -0.09, -0.12, -0.07, -0.10]})
    assert check(tmp_path)[1] == "differs"


def test_objectives_at_the_exact_optima_use_the_test_sampling_noise(tmp_path):
    check = cl.check_objectives_exact("scdro", "kl_dro:lam0=0.001")
    acc = {"mean": [0.80], "cvar:0.1": [0.79], "kl_dro:lam0=0.001,radius=0.1": [0.85],
           "kl_dro:lam0=0.001,radius=1": [0.70], "kl_dro:lam0=0.1,radius=0": [0.81]}
    write_exact(tmp_path, "scdro", "test_accuracy", acc)
    ours, verdict = check(tmp_path)           # 0.85 vs 0.81, noise 2*sqrt(2*.85*.15/1000)=3.2 pp
    assert verdict == "agrees" and "noise 3.19 pp" in ours
    acc["mean"] = [0.83]
    write_exact(tmp_path, "scdro", "test_accuracy", acc)
    assert check(tmp_path)[1] == "within noise"
    acc["mean"] = [0.90]
    write_exact(tmp_path, "scdro", "test_accuracy", acc)
    assert check(tmp_path)[1] == "differs"


def test_accuracy_check_tunes_every_solver_on_the_metric(tmp_path):
    rows = []
    for solver, cfgs in (("rscdro", {"a": 0.90, "b": 0.95}), ("spd", {"c": 0.93}),
                         ("fastdro", {"d": 0.80})):
        for cfg, acc in cfgs.items():
            for seed in range(3):
                for u in (0, 1):
                    rows.append({"dataset": "digits_st", "objective": "kl", "solver": solver,
                                 "config": cfg, "seed": seed, "update": u,
                                 "m_train_accuracy": acc * u + 0.001 * seed,
                                 "m_test_accuracy": acc * u - 0.001 * seed})
    (tmp_path / "f").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "f" / "results.parquet")
    ours, verdict = cl.check_accuracy("rscdro", ("spd", "fastdro"), worst="fastdro")(
        tmp_path / "f")
    # rscdro's setting b (95 %) is its best: ahead of spd's 93 % beyond the noise
    assert verdict == "agrees" and "rscdro 95.10" in ours
    ours, verdict = cl.check_accuracy("spd", ("rscdro",))(tmp_path / "f")
    assert verdict == "differs"


def test_wider_range_uses_the_fixed_accuracy_width_and_one_grid_step(tmp_path):
    def write(sq_plus, sq_sgm, lg_plus, lg_sgm):
        rows = []
        for label, w in (("squared / normal", {"splplus": sq_plus, "spl": 1.0, "sgm": sq_sgm}),
                         ("logistic / normal", {"splplus": lg_plus, "spl": 1.0, "sgm": lg_sgm}),
                         ("absolute / normal", {"splplus": 0.0, "spl": 0.0, "sgm": 3.0})):
            rows += [{"problem_label": label, "method": m, "width_decades_eps": v,
                      "lr1_good": m == "splplus"} for m, v in w.items()]
        (tmp_path / "f").mkdir(exist_ok=True)
        pd.DataFrame(rows).to_csv(tmp_path / "f" / "summary.csv", index=False)
        return cl.check_wider_range()(tmp_path / "f")

    ours, verdict = write(2.5, 1.0, 1.5, 1.5)   # squared wider by 1.5, logistic equal
    assert verdict == "agrees" and "absolute" not in ours
    assert write(1.5, 1.0, 1.5, 1.5)[1] == "within noise"   # one grid step: the noise
    assert write(2.5, 1.0, 0.5, 1.5)[1] == "differs"        # logistic narrower


def test_warmstart_check_tunes_on_the_training_objective(tmp_path):
    rows = []
    # rscdro: setting a has the lower objective (selected) but the lower accuracy
    for solver, cfg, F, acc in (("rscdro", "a", 0.30, 0.95), ("rscdro", "b", 0.40, 0.99),
                                ("spd", "c", 0.35, 0.93), ("fastdro", "", 0.50, 0.80)):
        for seed in range(3):
            rows.append({"dataset": "adult_st", "solver": solver, "config": cfg, "lr": 0.1,
                         "seed": seed, "F": F, "train_accuracy": acc + 0.001 * seed,
                         "test_accuracy": acc - 0.001 * seed})
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    ours, verdict = cl.check_warmstart(("rscdro",), ("spd", "fastdro"))(tmp_path)
    assert verdict == "agrees" and "rscdro 95.10" in ours and "fastdro lowest: agrees" in ours
    ours, verdict = cl.check_warmstart(("spd",), ("rscdro", "fastdro"))(tmp_path)
    assert verdict == "differs"


def test_warmstart_check_chooses_among_the_settings_run_with_every_seed(tmp_path):
    """--tune-seeds 1: the grid ran with seed 0, the chosen setting with seeds 0-2; a
    setting with seed 0 only is not chosen even when its one value is lower."""
    rows = []
    for solver, cfg, F, acc, seeds in (("rscdro", "a", 0.30, 0.95, 3), ("rscdro", "b", 0.10, 0.5, 1),
                                       ("spd", "c", 0.35, 0.93, 3), ("spd", "d", 0.40, 0.99, 1),
                                       ("fastdro", "", 0.50, 0.80, 3)):
        for seed in range(seeds):
            rows.append({"dataset": "adult_st", "solver": solver, "config": cfg, "lr": 0.1,
                         "seed": seed, "F": F, "train_accuracy": acc + 0.001 * seed,
                         "test_accuracy": acc - 0.001 * seed})
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    ours, verdict = cl.check_warmstart(("rscdro",), ("spd", "fastdro"))(tmp_path)
    assert "rscdro 95.10" in ours and "spd 93.10" in ours and "adult_st (seeds 0,1,2)" in ours
    assert verdict == "agrees"
