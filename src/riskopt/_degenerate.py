"""The estimators' check for a useless model (:class:`riskopt.DegenerateFitWarning`)."""
import warnings

import numpy as np
from sklearn.base import ClassifierMixin

from ._scaling import _spread
from .callbacks import DegenerateFitWarning
from .risks import MaxLoss

#: fewer effective samples (1 / sum q^2) than this at the optimum, out of at least ten times
#: as many, gives a DegenerateFitWarning (a MaxLoss risk asks for it, and is exempt)
_DEGENERATE_MIN_SAMPLES = 5


def warn_if_degenerate(est, X, y_enc, W, obj, W_fit, Z=None):
    """:class:`riskopt.DegenerateFitWarning` when the model is probably useless: constant
    predictions on the training data (one predicted class for a classifier fitted on
    several), or, for a spectral risk, optimal weights on fewer than
    ``_DEGENERATE_MIN_SAMPLES`` samples out of many. ``Z``: the predictions ``X @ W`` (+
    intercept), ``(n, K)``, when the solver has them (to rounding: the Newton solver's, no
    product with ``X`` here)."""
    n, d = X.shape
    if n < 2:
        return
    if Z is None or Z.shape != (n, W.shape[1]):
        Z = np.empty((n, W.shape[1]))
        for a in range(0, n, 8192):  # in blocks: a float32 X is not upcast whole
            Z[a:a + 8192] = X[a:a + 8192] @ W[:d]
        if est.fit_intercept:
            Z += W[d]
    risk = est.risk_
    why = None
    advice = ("The risk of the worst losses can be smallest for a constant model (e.g. the "
              "logistic CVaR of a small tail); try a larger tail fraction, risk='esrm:1' or "
              "'mean', or check the features.")
    if isinstance(est, ClassifierMixin) and np.min(y_enc) != np.max(y_enc):  # (labels 0..K-1)
        pred = (Z[:, 0] > 0) if Z.shape[1] == 1 else np.argmax(Z, axis=1)
        if np.all(pred == pred[0]):
            why = (f"it predicts the single class {est.classes_[int(pred[0])]} on all "
                   f"{n} training rows")
            advice = _class_advice(risk, y_enc, advice)
        elif float(np.max(np.ptp(Z - Z[:, :1], axis=0) if Z.shape[1] > 1
                          else np.ptp(Z))) <= 1e-4:
            why = ("its decision values are constant to 1e-4 on the training rows (the "
                   "coefficients are ~0; the predicted class is decided by rounding)")
    elif not isinstance(est, ClassifierMixin):
        top = max(float(np.max(np.abs(y_enc))), 1e-300)  # std of y / top: no over/underflow
        if np.all(y_enc == y_enc[0]):  # nothing to learn: no risk or tail fraction helps
            why = f"the target is constant ({float(y_enc[0]):.6g}) on the training rows"
            advice = "Check the target column."
        elif _spread(Z[:, 0], True, top) <= 1e-6 * _spread(y_enc, True, top):
            why = (f"its predictions are constant ({float(Z[0, 0]):.6g}) on the training "
                   "rows, to 1e-6 of the spread of y")
    if why is not None:
        warnings.warn(f"{type(est).__name__}(risk={risk}) returned a degenerate model: "
                      f"{why}. {advice}", DegenerateFitWarning, stacklevel=5)
        return
    if getattr(obj, "family", None) == "spectral" and n >= 10 * _DEGENERATE_MIN_SAMPLES \
            and not isinstance(risk, MaxLoss) and getattr(obj, "sample_weight", None) is None:
        q = getattr(obj, "_solution_weights", None)  # the solver's own (Newton), else here
        if q is None:
            q = obj.weights(obj.as_coef(W_fit))
        q = np.ravel(q)
        n_eff = 1.0 / float(q @ q)
        if n_eff < _DEGENERATE_MIN_SAMPLES:
            warnings.warn(
                f"{type(est).__name__}(risk={risk}): the fitted objective puts its weight "
                f"on about {n_eff:.1f} of {n} training samples (1 / sum q^2), so a handful "
                f"of points (outliers?) decide the model; try a larger tail fraction or a "
                f"shift cost, or check those samples.", DegenerateFitWarning, stacklevel=5)


def _class_advice(risk, y_enc, advice):
    """What to try when a classifier predicts one class: the default ``advice`` (a larger tail,
    ``esrm:1`` or the mean) names no risk that is the one in use; for the mean (whose optimum
    is then constant: imbalanced classes or little signal) and ``esrm:1`` it says how to weight
    the classes."""
    from .risks import ESRM, Mean

    share = float(np.max(np.bincount(np.asarray(y_enc, dtype=np.int64)))) / len(y_enc)
    weights = ("weight the classes (e.g. sample_weight=sklearn.utils.class_weight."
               "compute_sample_weight('balanced', y))")
    if isinstance(risk, Mean):
        return (f"The mean loss itself is smallest for this constant model: the largest class "
                f"holds {share:.1%} of the rows, or the features carry little signal; "
                f"{weights} or check the features.")
    if isinstance(risk, ESRM) and float(risk.rho) == 1.0 and not risk.shift_cost:
        return (f"The risk of the worst losses can be smallest for a constant model (the "
                f"largest class holds {share:.1%} of the rows); try risk='mean', {weights}, "
                f"or check the features.")
    return advice


def progress_reached(obj, W, scale=1.0):
    """``"; relative (sub)gradient norm ... and objective ... at the end"`` for the
    ConvergenceWarning: how far the run got (two gradient evaluations; objective values x
    ``scale``, the target scaling's factor; empty on failure)."""
    try:
        f0, g0 = obj.value_grad(obj.zeros())
        f1, g1 = obj.value_grad(obj.as_coef(W))
        rel = float(np.linalg.norm(g1)) / max(float(np.linalg.norm(g0)), 1e-300)
        return (f"; at the end the relative (sub)gradient norm is {rel:.2g} and the objective "
                f"{float(f1) * scale:.6g} (from {float(f0) * scale:.6g} at zero)")
    except Exception:  # a plug-in family without value_grad: say nothing more
        return ""
