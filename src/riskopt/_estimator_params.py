"""Parameter constraints of the estimators (scikit-learn's ``_parameter_constraints``) that
need more than scikit-learn's own: the solver registry's names, the fairness constraints."""
from numbers import Real

from sklearn.utils._param_validation import Interval, StrOptions

from . import solvers as _solvers
from .fairness import CONSTRAINT_SPECS


class _RegisteredSolver(StrOptions):
    """``"auto"`` or a name of :func:`riskopt.solvers.available` (looked up at validation time,
    so solvers registered after import are accepted)."""

    def __init__(self):  # noqa: D107  (no call to StrOptions.__init__: options are dynamic)
        self.type = str
        self.deprecated = set()
        self.hidden = False

    @property
    def options(self):
        return {"auto", *_solvers.available()}

    @options.setter
    def options(self, value):  # StrOptions machinery may assign; the registry is the truth
        pass

    def is_satisfied_by(self, val):
        return isinstance(val, str) and val.lower() in self.options

    def __str__(self):
        return f"a str among {sorted(self.options)}"


#: the fairness parameters (:mod:`riskopt.fairness`)
FAIRNESS_CONSTRAINTS = {
    "constraint": [StrOptions(set(CONSTRAINT_SPECS)), None],
    "constraint_tol": [Interval(Real, 0, None, closed="neither")],
    "randomized": ["boolean"],
}


#: parameter sets (class, ((name, type, value), ...)) that passed scikit-learn's validation
_VALID_PARAMS = set()
#: the key entry of a constrained name that ``est`` lacks
_ABSENT = object()


def validate_once(est, validate):
    """``validate()`` (scikit-learn's parameter validation of ``est``) unless the same
    parameter values, with their types, passed it before in this process: it was a tenth of a
    small default fit (1,000 x 8), paid again by every clone of a grid search. Unhashable
    values (a ``solver_params`` dict) are always validated."""
    try:
        # (a constrained name that is not a parameter of this class, e.g. ``randomized`` of a
        # RiskRegressor, is absent: scikit-learn's validation skips it too)
        key = (type(est), tuple((k, type(v), v) for k, v in sorted(
            (k, getattr(est, k, _ABSENT)) for k in est._parameter_constraints)))
        hash(key)
    except (TypeError, AttributeError):
        key = None
    if key is not None and key in _VALID_PARAMS:
        return
    validate()
    if key is not None:
        if len(_VALID_PARAMS) >= 512:
            _VALID_PARAMS.clear()
        _VALID_PARAMS.add(key)
