"""Where the benchmark runner may write: spec names that are one safe folder name, and every
written path checked to lie inside the results folder.

A spec's ``name`` becomes the folder ``results/<name>``; a name such as ``".."`` would make
the runner write (and with ``--fresh`` delete) files in the working directory, ``"."`` into
``results/`` itself. :func:`check_spec_name` therefore accepts only one path component made
of letters, digits and ``_ - + .`` that does not start with a dot (so no ``.``/``..``, no
separator, no absolute path or drive, no control character), at most 120 characters; and
:func:`check_inside` refuses, before anything is written, a path (``cells/``, ``fstar.json``,
a cell file, ``figures/``) that resolves (symbolic links followed) outside the results folder.
"""
import re
from pathlib import Path

from ._io import OutputError

_NAME = re.compile(r"[A-Za-z0-9_+\-][A-Za-z0-9_.+\-]{0,119}")


def check_spec_name(value, key="name"):
    """``value`` if it is a safe single folder name, else a ``SpecError`` naming ``key``."""
    from .spec_tools import SpecError

    if not isinstance(value, str) or not value.strip():
        raise SpecError(key, f"must be a non-empty string, got {value!r}")
    if value in (".", ".."):
        raise SpecError(key, f"{value!r} is not a folder name of its own (the results would "
                             "land outside results/<name>); give a name such as 'my_run'")
    if not _NAME.fullmatch(value):
        raise SpecError(key, f"{value!r} must be one folder name: letters, digits, '_', '-', "
                             "'+' and '.', not starting with '.', at most 120 characters (no "
                             "path separators, spaces or control characters)")
    return value


def default_out(name):
    """``results/<name>`` for a checked spec name."""
    root = Path("results")
    out = root / check_spec_name(name)
    check_inside(root, out)
    return out


def check_inside(root, *paths):
    """Refuse (one :class:`OutputError` line) any of ``paths`` that does not resolve to a
    location strictly inside ``root`` (symbolic links followed)."""
    base = Path(root).resolve()
    for p in paths:
        real = Path(p).resolve()
        if real == base or base not in real.parents:
            raise OutputError(f"refusing to write {p}: it resolves to {real}, outside the "
                              f"results folder {base} (a symbolic link or '..' in the path?); "
                              "remove the link or choose another --out")
    return paths
