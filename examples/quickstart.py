"""The ten-line start: a spectral-risk objective, its reference optimum, a stochastic solver
that converges to it, and the scikit-learn estimator (the getting-started page shows this file).

Run: ``python examples/quickstart.py`` (a few seconds; the data set ships with the package).
"""
import riskopt as ro

data = ro.datasets.load("concrete")                    # bundled, the papers' preparation
n = data.X_train.shape[0]
risk = ro.CVaR(0.5, shift_cost=0.5)                    # worst half of the losses, chi2 shift
obj = ro.Objective(ro.SquaredLoss(), risk, data.X_train, data.y_train, l2_reg=1 / n)
f_star = ro.solvers.LBFGS().run(obj).value             # reference optimum f*
res = ro.solvers.Prospect(lr=0.01, random_state=0).run(
    obj, max_epochs=64, callback=ro.Trace(f_star=f_star))
print(f"F(w) - f* = {res.value - f_star:.1e}; suboptimality <= 1e-8 after "
      f"{res.trace.passes_to(1e-8):g} passes")
est = ro.RiskRegressor(risk="cvar:0.1").fit(data.X_train, data.y_train)  # scikit-learn API
print(f"RiskRegressor, CVaR 0.1: test R^2 = {est.score(data.X_test, data.y_test):.3f}")
