"""Re-encode committed parquet files with the writer's options, losslessly.

The options are :func:`riskopt.bench._io.parquet_options` (zstd since stop 38, the float columns
byte-stream split since stop 39). For every ``*.parquet`` tracked under ``benchmarks/results`` (or
the files named), the table is read, written with those options (zstd level ``--level``, default
9) to a temporary file, read
back and compared with the original: ``Table.equals(..., check_metadata=True)`` (schema, schema
metadata, every column's values; floats bit for bit up to NaN payloads, which parquet keeps).
Only then is the file replaced (atomically) and only if it got smaller. Prints bytes before /
after. Usage (repository root)::

    python scripts/reencode_parquet.py [FILE ...] [--level 9]
"""
import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from riskopt.bench._io import parquet_options


def reencode(path, level):
    old = pq.read_table(path)
    fd, tmp = tempfile.mkstemp(suffix=".parquet", dir=os.path.dirname(path))
    os.close(fd)
    try:
        pq.write_table(old, tmp, **dict(parquet_options(old), compression_level=level))
        new = pq.read_table(tmp)
        if not new.equals(old, check_metadata=True):
            raise AssertionError(f"{path}: the re-encoded table differs")
        a, b = os.path.getsize(path), os.path.getsize(tmp)
        if b < a:
            os.replace(tmp, path)
            return a, b
        return a, a
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--level", type=int, default=9)
    args = ap.parse_args()
    files = args.files or subprocess.run(
        ["git", "ls-files", "benchmarks/results/**.parquet", "benchmarks/results/*.parquet"],
        capture_output=True, text=True, check=True).stdout.split()
    tot_a = tot_b = 0
    for f in sorted(set(files)):
        a, b = reencode(Path(f), args.level)
        tot_a, tot_b = tot_a + a, tot_b + b
        print(f"{a:>11,} -> {b:>11,}  {f}")
    print(f"{len(set(files))} files: {tot_a:,} -> {tot_b:,} bytes")


if __name__ == "__main__":
    main()
