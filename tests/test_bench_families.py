"""A problem family and a solver added from outside riskopt run through the benchmark runner
with no edit of riskopt: the family is registered (as the ``riskopt.objectives`` entry point
would), its ``spec_params`` become objective keys of the spec, its ``reference_solution`` gives
f*, and the solver declaring the family is benchmarked like any other."""
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

from riskopt import objectives
from riskopt.bench import run
from riskopt.objectives.base import LinearModelObjective, Reference
from riskopt.solvers import Solver, _registry, register


class ScaledMean(LinearModelObjective):
    """``scale * mean_i l_i(w) + mu/2 |w|^2``: a toy family with one parameter."""

    family = "toy_scaled_mean"
    spec_params = {"scale": 1.0}

    def __init__(self, loss, X, y, scale=1.0, l2_reg=0.0, fit_intercept=False):
        self._init_data(loss, X, y, l2_reg, fit_intercept)
        self.scale = float(scale)

    def value_grad(self, coef, aux=None):
        W = self.as_matrix(coef)
        losses, derivs = self.losses_derivs(W)
        G = self.scale * self.X.T @ derivs / self.n + self.reg[:, None] * W
        return self.scale * losses.mean() + self._reg_value(W), G.reshape(np.shape(coef))

    def value(self, coef, aux=None):
        return self.value_grad(coef)[0]

    def reference_solution(self, method="auto", **options):
        self._check_method(method)
        res = minimize(lambda w: self.value_grad(w), np.zeros(self.p * self.K), jac=True,
                       method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 0.0})
        coef = self.as_coef(res.x)
        return Reference(coef=coef, value=self.value(coef), method="lbfgs", n_iter=res.nit)


class _State(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator


class ToyGD(Solver):
    """Full-gradient descent on the toy family (one update = one pass)."""

    name = "toy_family_gd"
    families = ("toy_scaled_mean",)

    def _init(self, objective, W, rng):
        return _State(W, 0, rng)

    def _pass(self, objective, state, indices):
        W = state.coef - self.lr * objective.grad(state.coef)
        return state._replace(coef=W, epoch=state.epoch + 1)


@pytest.fixture
def toy_family():
    objectives.register_family(ScaledMean)
    register(ToyGD)
    yield
    objectives._registry._FAMILIES.pop(ScaledMean.family, None)
    _registry._REGISTRY.pop(ToyGD.name, None)


def test_registered_family_runs_through_the_benchmark(toy_family, tmp_path):
    spec = tmp_path / "toy.toml"
    spec.write_text("""
name = "toy_family"
datasets = ["yacht"]
seeds = [0]
passes = 5
lr = [0.1]
loss = "squared"
l2_reg = "1/n"
objectives = [{family = "toy_scaled_mean", scale = 2.0}, {family = "toy_scaled_mean"}]
solvers = ["toy_family_gd"]
""")
    res = run(str(spec), out=tmp_path / "out", jobs=1, progress=False, plot=False)
    assert res.complete and res.n_cells == 2
    table = pd.read_parquet(res.table)
    assert set(table["solver_name"]) == {"toy_family_gd"}
    assert set(table["objective"]) == {"toy_scaled_mean:scale=2", "toy_scaled_mean:scale=1"}
    for label, g in table.groupby("objective"):
        # f* is the family's reference solution; gradient descent decreases towards it
        assert np.all(np.diff(g["value"].to_numpy()) <= 1e-12)
        assert (g["value"] >= g["f_star"] - 1e-9).all()
    f = table.groupby("objective")["f_star"].first()
    assert f["toy_scaled_mean:scale=2"] > f["toy_scaled_mean:scale=1"]


def test_unknown_family_parameter_is_named(toy_family, tmp_path):
    from riskopt.bench.spec import SpecError, load_spec

    spec = tmp_path / "bad.toml"
    spec.write_text('name = "bad"\ndatasets = ["yacht"]\nsolvers = ["toy_family_gd"]\n'
                    'objectives = [{family = "toy_scaled_mean", beta = 0.5}]\n')
    with pytest.raises(SpecError, match="beta"):
        load_spec(str(spec))
