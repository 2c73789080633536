"""Shrink committed PNG figures in place: a palette PNG (256, then 64 colours), scaled down
(to 2/3, then 1/2 of its pixels' width) only while it is still over the limit.

The picture is not redrawn: ``results.parquet`` stays the record and ``riskopt bench plot``
draws the figure again (a small PNG already, :func:`riskopt.bench._io.small_png`). A file is
rewritten only if the result is smaller; a file already under the limit and in palette mode
is left alone.

Usage (from the repository root)::

    python scripts/compact_pngs.py [--limit BYTES] [--dry-run] PNG ...

Prints one line per file (old and new size) and the totals.
"""
import argparse
import io
import sys
from pathlib import Path

from riskopt.bench import _io


def compact(raw, limit=_io.PNG_LIMIT):
    """``raw`` (PNG bytes) as the smallest of: palette PNG at full size, then scaled by 2/3
    and 1/2, stopping at the first one under ``limit``."""
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as im:
        rgb = im.convert("RGB")
    best = raw
    for scale in (1.0, 2 / 3, 0.5):
        img = rgb if scale == 1.0 else rgb.resize(
            (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))),
            Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        img.save(buf, format="png")
        for colors in (256, 64):
            data = _io._quantised(buf.getvalue(), colors)
            if len(data) < len(best):
                best = data
            if len(data) <= limit:
                return best
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--limit", type=int, default=_io.PNG_LIMIT)
    ap.add_argument("--dry-run", action="store_true", help="print the sizes, write nothing")
    args = ap.parse_args(argv)
    before = after = 0
    for p in args.files:
        raw = p.read_bytes()
        from PIL import Image

        with Image.open(io.BytesIO(raw)) as im:
            done = im.mode == "P" and len(raw) <= args.limit
        new = raw if done else compact(raw, args.limit)
        before, after = before + len(raw), after + len(new)
        print(f"{p}: {len(raw)} -> {len(new)} bytes")
        if new != raw and not args.dry_run:
            _io.atomic_write_bytes(p, new)
    print(f"{len(args.files)} file(s): {before} -> {after} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
