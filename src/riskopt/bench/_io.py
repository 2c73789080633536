"""Crash-safe file writes: a temporary file in the target folder, ``fsync``, ``os.replace``,
``fsync`` of the folder.

A reader (or a resumed run) therefore sees either the old file or the complete new one, never
a half-written file, even if the process or the machine dies mid-write. The temporary file
(``.<name>.<random>.tmp``) is removed on every exit path, ``KeyboardInterrupt`` included; only
``kill -9`` or a power cut can leave one, and the next run of the folder removes it
(:func:`sweep_temporaries`). Files get the permissions ``0o666 & ~umask`` like any file the
process creates (``tempfile.mkstemp`` alone would make them ``0600``).

The command line uses the same writer for its ``--out`` files, with
:func:`check_output_file` to refuse a bad destination before any work, and
:func:`describe_os_error` to turn an ``OSError`` into one line naming the file and the fix.
"""
import errno
import json
import os
import re
import tempfile
import time
import warnings
from pathlib import Path

from .._runtime import pending_file as _pending_file


class RecoveryWarning(UserWarning):
    """Something on disk was repaired and the run goes on: a corrupt file was renamed aside
    and will be recomputed, a stale lock or a leftover temporary file was removed."""


class OutputError(Exception):
    """An output file or folder cannot be written (the message names it and the fix)."""


_TMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")  # mkstemp's 8 random characters


def umask():
    """The process umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but brief)
    os.umask(old)
    return old


def fsync_dir(folder):
    """Make a rename in ``folder`` durable (a no-op where directories cannot be synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, write, make_parents=True):
    """Write ``path`` through ``write(binary file object)``, atomically and durably.

    The temporary file lives in the target folder (so that the rename is atomic), gets the
    permissions of a normal new file, is ``fsync``-ed, renamed over ``path``, and the folder
    is ``fsync``-ed. On any exception (``KeyboardInterrupt`` included) the temporary file is
    removed and ``path`` is left as it was.
    """
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        _pending_file(tmp)  # removed by the CLI's Ctrl-C exit
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), 0o666 & ~umask())
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _pending_file(tmp, add=False)
        tmp = None
        fsync_dir(path.parent)
    finally:
        if tmp is not None:
            _pending_file(tmp, add=False)
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def atomic_write_bytes(path, data, make_parents=True):
    return atomic_write(path, lambda fh: fh.write(data), make_parents=make_parents)


def atomic_write_text(path, text, make_parents=True):
    return atomic_write_bytes(path, text.encode("utf-8"), make_parents=make_parents)


def atomic_write_json(path, obj):
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False,
                                              default=_json_default) + "\n")


def write_results(folder, payload, md, json_name="results.json"):
    """A benchmark script's outputs: ``payload`` as ``folder/json_name`` (skipped when None)
    and the Markdown lines ``md`` as ``folder/results.md``, both atomically; the Markdown is
    printed too. Returns the folder.

    The JSON is written first. ``md`` may be a function of no arguments that returns the
    lines: it is called only after the JSON is on disk. A formatting error then loses the
    Markdown only and keeps the measured data, so scripts should pass their Markdown step
    this way.
    """
    folder = Path(folder)
    if payload is not None:
        atomic_write_json(folder / json_name, payload)
    if callable(md):
        md = md()
    text = "\n".join(md) + "\n"
    atomic_write_text(folder / "results.md", text)
    print(text, end="")
    return folder


def atomic_write_parquet(path, frame, metadata=None):
    """Write a DataFrame to parquet atomically (pyarrow); ``metadata`` goes in the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    return atomic_write(path, lambda fh: pq.write_table(table, fh, **parquet_options(table)))


def parquet_options(table):
    """``pyarrow.parquet.write_table`` options of the results tables: zstd level 9 (10-15 %
    smaller than the default snappy, stop 38) and the float columns byte-stream split (their
    bytes regrouped by significance before compression; dictionary encoding, which would take
    precedence, kept for the other columns): another ~32 % on the per-pass tables (stop 39:
    sorel_fig5 3.56 -> 2.41 MB). Lossless: the same table is read back."""
    import pyarrow as pa

    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    others = [f.name for f in table.schema if not pa.types.is_floating(f.type)]
    return dict(compression="zstd", compression_level=9, use_dictionary=others,
                use_byte_stream_split=floats or False)


#: The most bytes a committed figure may take; :func:`small_png` aims below it.
PNG_LIMIT = 150_000


def _quantised(raw, colors):
    """PNG bytes ``raw`` as a ``colors``-entry palette PNG (Pillow), or ``raw`` without it."""
    import io

    try:
        from PIL import Image
    except ImportError:  # matplotlib requires Pillow, so this is a safety net only
        return raw
    with Image.open(io.BytesIO(raw)) as im:
        pal = im.convert("RGB").quantize(colors=colors, method=Image.Quantize.FASTOCTREE)
    buf = io.BytesIO()
    pal.save(buf, format="png", optimize=True)
    return min(raw, buf.getvalue(), key=len)


def small_png(fig, dpi=100, limit=PNG_LIMIT, **kwargs):
    """``fig`` as PNG bytes of at most ``limit`` bytes where possible: drawn at ``dpi`` and
    quantised to a 256-colour palette; if that is still too big, 64 colours, then lower dpi
    (down to 50). Returns the smallest try if none fits (a huge grid of panels)."""
    import io

    best = None
    for d in sorted({dpi, *(x for x in (80, 64, 50) if x < dpi)}, reverse=True):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=d, **kwargs)
        for colors in (256, 64):
            data = _quantised(buf.getvalue(), colors)
            if best is None or len(data) < len(best):
                best = data
            if len(data) <= limit:
                return data
    return best


def atomic_savefig(fig, path, small=True, **kwargs):
    """``fig.savefig`` to a temporary file, then move it in place. A ``.png`` is written by
    :func:`small_png` (``dpi`` default 100; ``small=False``: matplotlib's own PNG)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt == "png" and small:
        dpi = kwargs.pop("dpi", None) or 100
        return atomic_write_bytes(path, small_png(fig, dpi=dpi, **kwargs))
    return atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, **kwargs))


# ---------------------------------------------------------------------------- repair
def quarantine(path, reason):
    """Rename a corrupt file aside (``<name>.corrupt-<UTC time>``) and warn in one line.

    Returns the new path (``None`` when the file vanished meanwhile).
    """
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    k = 1
    while dest.exists():
        k += 1
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{k}")
    try:
        os.replace(path, dest)
    except FileNotFoundError:
        return None
    fsync_dir(path.parent)
    warnings.warn(f"{path} is corrupt ({reason}); moved aside to {dest.name}, it will be "
                  "recomputed", RecoveryWarning, stacklevel=2)
    return dest


def sweep_temporaries(*folders):
    """Remove the temporary files (``.<name>.<random>.tmp``) that a killed writer left in
    ``folders``; only call this while holding the folder's lock. Returns their paths."""
    gone = []
    for folder in folders:
        try:
            entries = list(Path(folder).iterdir())
        except OSError:
            continue
        for p in entries:
            if _TMP.match(p.name) and p.is_file():
                try:
                    p.unlink()
                    gone.append(p)
                except OSError:
                    pass
    if gone:
        warnings.warn(f"removed {len(gone)} temporary file(s) left by an interrupted run: "
                      + ", ".join(str(p) for p in gone[:3]) + (", ..." if len(gone) > 3 else ""),
                      RecoveryWarning, stacklevel=2)
    return gone


# ---------------------------------------------------------------------------- messages
_FIX = {
    errno.EACCES: "permission denied; choose a folder you can write to, or fix its permissions",
    errno.EPERM: "operation not permitted; choose a folder you can write to",
    errno.EROFS: "read-only file system; choose a folder on a writable disk",
    errno.ENOSPC: "no space left on the device; free some space or write elsewhere",
    errno.EDQUOT: "disk quota exceeded; free some space or write elsewhere",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.EISDIR: "it is a folder; give a file name",
    errno.ENOENT: "no such file or folder; check the path (create the folder first)",
    errno.EEXIST: "a file of that name is in the way; choose another path",
    errno.ENAMETOOLONG: "the name is too long; choose a shorter path",
}


def describe_os_error(exc, what="cannot write"):
    """``OSError`` -> ``"<what> <file>: <reason>; <fix>"`` (one line)."""
    name = getattr(exc, "filename", None)
    reason = _FIX.get(exc.errno) or exc.strerror or str(exc) or type(exc).__name__
    return f"{what} {name}: {reason}" if name not in (None, "") else f"{what}: {reason}"


def check_output_file(path, flag="--out"):
    """Refuse an output file that cannot be written, before any work: a folder, a missing or
    non-folder parent, a parent where no file can be created (probed by creating and removing
    a temporary file, since permission bits do not tell for root, ACLs or read-only mounts).
    Raises :class:`OutputError` with one line naming the path and the fix."""
    dest = Path(path)
    parent = dest.parent
    if dest.is_dir():
        raise OutputError(f"{flag} {dest} is a folder; give a file name, e.g. {dest / 'out'}")
    if not parent.exists():
        probe = parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise OutputError(f"{flag} {dest}: {probe} is a file, not a folder; choose another "
                              "path")
        raise OutputError(f"{flag} {dest}: folder {parent} does not exist; create it first "
                          f"(mkdir -p {parent})")
    if not parent.is_dir():
        raise OutputError(f"{flag} {dest}: {parent} is a file, not a folder; choose another path")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        exc.filename = str(dest)
        raise OutputError(f"{flag}: {describe_os_error(exc)}") from None
    os.close(fd)
    os.unlink(tmp)
    return dest


def ensure_folder(path, what="output folder"):
    """Create ``path`` (and parents) as a folder, or raise :class:`OutputError` in one line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path} is a file, not a folder; choose another output "
                          "folder (--out)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise OutputError(f"{what} {path}: {probe} is a file, not a folder; choose another "
                              "output folder (--out)") from None
        exc.filename = str(path)
        raise OutputError(f"{describe_os_error(exc, f'cannot create {what}')}") from None
    return path


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
