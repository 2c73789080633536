"""Registry of the problem families: the built-in ones and those of third-party packages,
declared in the ``riskopt.objectives`` entry-point group (value: an
:class:`~riskopt.objectives.base.ObjectiveBase` subclass with a ``family`` name)."""
from .._plugins import load_entry_points

ENTRY_POINT_GROUP = "riskopt.objectives"

_FAMILIES = {}
_loaded = {"entry_points": False}


def register_family(cls):
    """Class decorator: make ``cls`` the objective class of the family ``cls.family``."""
    name = getattr(cls, "family", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"an objective class needs a string attribute 'family', got {name!r}")
    _FAMILIES.setdefault(name, cls)
    return cls


def _load_entry_points():
    if _loaded["entry_points"]:
        return
    _loaded["entry_points"] = True
    load_entry_points(ENTRY_POINT_GROUP, register_family)


def families():
    """``{family name: objective class}`` of every registered family."""
    _load_entry_points()
    return dict(_FAMILIES)


def get_family(name):
    """The objective class of the family ``name``."""
    fams = families()
    if name not in fams:
        raise ValueError(f"unknown problem family {name!r}; available: {sorted(fams)}")
    return fams[name]
