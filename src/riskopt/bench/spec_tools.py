"""Small validation helpers shared by the spec schema and the problem definitions."""
import hashlib
import json
import math
import numbers
import re
from pathlib import Path


class SpecError(ValueError):
    """A bad experiment spec. ``key`` is the offending key path, e.g. ``solvers[1].lr[0]``."""

    def __init__(self, key, message):
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


def is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def check_int(key, v, minimum=1):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise SpecError(key, f"must be an integer >= {minimum}, got {v!r}")
    return int(v)


def check_number(key, v, lo=None, lo_open=False):
    if not is_number(v) or not math.isfinite(v):
        raise SpecError(key, f"must be a finite number, got {v!r}")
    v = float(v)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise SpecError(key, f"must be {'>' if lo_open else '>='} {lo:g}, got {v:g}")
    return v


def check_name(key, value):
    if not isinstance(value, str) or not value.strip():
        raise SpecError(key, f"must be a non-empty string, got {value!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.+\-]+", value):
        raise SpecError(key, f"{value!r} may only contain letters, digits, '_', '-', '+' and '.'")
    return value


def read_utf8(path):
    """The text of the spec file ``path``; a file that is not UTF-8 is one :class:`SpecError`
    naming the file and the first bad byte (not a traceback)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError("", f"spec file {path} is not UTF-8 text (byte {exc.start}: "
                            f"{exc.object[exc.start:exc.start + 1]!r}); save it as UTF-8 "
                            "TOML") from None


def unknown_keys(key, table, allowed):
    for k in table:
        if k not in allowed:
            raise SpecError(f"{key}.{k}" if key else k,
                            f"unknown key; allowed keys: {', '.join(sorted(allowed))}")


def as_list(key, value):
    if isinstance(value, (list, tuple)):
        return list(value)
    raise SpecError(key, f"must be a list, got {type(value).__name__} {value!r}")


def one_of(key, value, allowed):
    if value not in allowed:
        raise SpecError(key, f"must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def parse_l2_reg(value, key="l2_reg"):
    """Validate an l2 strength: a number >= 0, ``"c/n"`` or ``"a/(b n)"`` (n = training size).

    Returns the value unchanged (a float or the normalised string); use :func:`l2_value`.
    """
    if is_number(value):
        v = float(value)
        if not math.isfinite(v) or v < 0:
            raise SpecError(key, f"must be a finite number >= 0, got {value!r}")
        return v
    if isinstance(value, str):
        s = value.replace(" ", "")
        num = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
        if re.fullmatch(num + r"/n", s) or re.fullmatch(num + r"/\(" + num + r"\*?n\)", s):
            return s
        raise SpecError(key, f"cannot read {value!r}; use a number, 'c/n' or '1/(k n)', "
                             "e.g. '1/n' or '1/(10n)'")
    raise SpecError(key, f"must be a number or a string such as '1/n', got {value!r}")


def l2_value(l2_reg, n):
    """The numeric l2 strength for ``n`` training samples."""
    if is_number(l2_reg):
        return float(l2_reg)
    s = l2_reg.replace(" ", "")
    m = re.fullmatch(r"([0-9.eE+-]+)/n", s)
    if m:
        return float(m.group(1)) / n
    m = re.fullmatch(r"([0-9.eE+-]+)/\(([0-9.eE+-]+)\*?n\)", s)
    return float(m.group(1)) / (float(m.group(2)) * n)


def content_hash(obj):
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def fmt(v):
    return f"{v:g}" if is_number(v) else str(v)
