"""The solver registry: built-in solvers register on import of :mod:`riskopt.solvers` (every
module of the package is discovered and imported), third-party solvers through the
``riskopt.solvers`` entry-point group.

A third-party package declares, in its ``pyproject.toml``::

    [project.entry-points."riskopt.solvers"]
    mysolver = "mypkg.solvers:MySolver"      # a Solver subclass, or a module that registers
                                             # its solvers with @riskopt.solvers.register

and the solver is then available by name everywhere: ``riskopt.solvers.get("mysolver")``, the
estimators' ``solver=`` parameter, ``riskopt bench run`` specs and the CLI.
"""
import importlib
import pkgutil

from .._plugins import load_entry_points

ENTRY_POINT_GROUP = "riskopt.solvers"

_REGISTRY = {}
_state = {"builtins": False, "entry_points": False}


class IncompatibleObjectiveError(ValueError):
    """A solver was given an objective of a family (or kind) it does not solve."""


def register(cls):
    """Class decorator adding a solver to the registry under ``cls.name`` (lower case)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name != name.lower():
        raise ValueError(f"a solver needs a lower-case string attribute 'name', got {name!r}")
    if not getattr(cls, "families", None):
        raise ValueError(f"solver {name!r} must declare the problem families it solves "
                         "(class attribute 'families')")
    other = _REGISTRY.get(name)
    if other is not None and other is not cls and (other.__module__, other.__qualname__) != (
            cls.__module__, cls.__qualname__):
        raise ValueError(f"solver name {name!r} is already registered by "
                         f"{other.__module__}.{other.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def _load_builtins():
    if _state["builtins"]:
        return
    _state["builtins"] = True
    package = __name__.rsplit(".", 1)[0]
    path = importlib.import_module(package).__path__
    for info in pkgutil.iter_modules(path):
        if not info.name.startswith("_") and info.name != "base":
            importlib.import_module(f"{package}.{info.name}")


def _load_entry_points():
    if _state["entry_points"]:
        return
    _state["entry_points"] = True
    load_entry_points(ENTRY_POINT_GROUP, _register_loaded)


def _register_loaded(obj):
    if not isinstance(obj, type):  # a module that registered its solvers on import
        return
    if not all(callable(getattr(obj, m, None)) for m in ("run", "incompatibility")):
        raise TypeError(f"{obj!r} is not a riskopt.solvers.Solver subclass")
    register(obj)


def reload_entry_points():
    """Scan the ``riskopt.solvers`` entry points again (after installing a plug-in)."""
    _state["entry_points"] = False
    _load_entry_points()


def _all():
    _load_builtins()
    _load_entry_points()
    return _REGISTRY


def get_class(name):
    """The solver class registered under ``name``."""
    reg = _all()
    key = str(name).lower()
    if key not in reg:
        raise ValueError(f"unknown solver {name!r}; available: {sorted(reg)}")
    return reg[key]


def get(name, **params):
    """A solver instance from its registry name, e.g. ``get("prospect", lr=0.03)``."""
    return get_class(name)(**params)


def available(family=None):
    """Sorted registry names (of the solvers of ``family`` when given)."""
    reg = _all()
    return sorted(k for k, cls in reg.items() if family is None or family in cls.families)


def solvers_for(objective):
    """Names of the registered solvers that accept ``objective`` (family and checks)."""
    return [name for name in available(getattr(objective, "family", None))
            if get(name).incompatibility(objective) is None]
