"""Entry-point plug-ins: the one loader behind the solver and problem-family registries."""
import warnings
from importlib import metadata


def load_entry_points(group, register):
    """Load every entry point of ``group`` and pass the loaded object to ``register``.

    A broken plug-in (import error, wrong object) must not break riskopt: it gives a
    ``RuntimeWarning`` naming the plug-in and is skipped.
    """
    for ep in metadata.entry_points(group=group):
        try:
            register(ep.load())
        except Exception as exc:
            warnings.warn(f"riskopt: could not load plug-in {ep.name!r} ({ep.value}) of the "
                          f"{group!r} entry-point group: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=3)
