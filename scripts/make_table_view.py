"""Replace a results folder's ``results.parquet`` by a filtered view of its parent's table
(:mod:`riskopt.bench._view`), after checking that the view gives the same table bit for bit.

For each FOLDER (default: every ``benchmarks/results/<name>_3sets`` whose ``<name>`` folder has
a table), with its parent ``<name>`` (or ``--parent``):

1. :func:`riskopt.bench._view.make_view` builds the view (the parent's rows for the data sets
   the folder's table holds, the ``spec`` column set to the folder's name) and refuses unless it
   equals the folder's table column by column, bit for bit; it then records the view, with the
   rows' digest, in the folder's ``metadata.json`` (``files.table``);
2. the table is moved aside and :func:`riskopt.bench._view.read_table` must give the same
   table back, bit for bit, and ``riskopt bench report`` the same Markdown and CSV text as with
   the table present, and every cell of the folder's spec must count as finished (restorable
   from the parent table);
3. only then is ``results.parquet`` deleted (``--git-rm``: ``git rm`` it); on any failure the
   folder is put back as it was (table and ``metadata.json``) and the exit status is 1.

Usage (from the repository root)::

    python scripts/make_table_view.py [FOLDER ...] [--parent PARENT] [--git-rm]
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from riskopt.bench import _view, report, runner
from riskopt.bench.spec import spec_from_dict

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _reports(folder):
    return (report.build_report(folder, relative_to=folder),
            report.build_report(folder, fmt="csv"))


def convert(folder, parent, git_rm=False):
    """Steps 1-3 for one folder; returns a list of problems (empty: converted)."""
    folder, parent = Path(folder), Path(parent)
    table, meta = folder / _view.TABLE, folder / "metadata.json"
    if not table.exists():
        return [f"{folder}: no results.parquet (already a view?)"]
    before = _reports(folder)
    own_digest = _view.digest(_view.read_table(folder))
    spec = spec_from_dict(json.loads((folder / "spec.json").read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        keep_table, keep_meta = Path(tmp) / "t.parquet", Path(tmp) / "m.json"
        shutil.copy2(table, keep_table)
        shutil.copy2(meta, keep_meta)
        problems = []
        try:
            entry = _view.make_view(folder, parent)
            table.unlink()
            got = _view.read_table(folder)
            if _view.digest(got) != own_digest:
                problems.append("the view read back differs from the table")
            if _reports(folder) != before:
                problems.append("bench report differs without the table")
            n, done = runner.status(spec, folder)
            if done != n:
                problems.append(f"{n - done} of {n} runs would not be restored from the view")
        except Exception as exc:  # any failure: put the folder back
            problems.append(f"{type(exc).__name__}: {exc}")
        if problems:
            shutil.copy2(keep_table, table)
            shutil.copy2(keep_meta, meta)
            return [f"{folder}: {p}" for p in problems]
    if git_rm:
        subprocess.run(["git", "-C", str(ROOT), "rm", "-q", "--cached",
                        str(table.resolve().relative_to(ROOT))], check=True)
    print(f"{folder.name}: a view of {entry['view_of']} ({entry['rows']:,} rows, "
          f"{entry['digest'][:19]}...)")
    return []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--parent", type=Path)
    ap.add_argument("--git-rm", action="store_true")
    args = ap.parse_args(argv)
    folders = args.folders or sorted(
        p for p in RESULTS.glob("*_3sets") if (p / _view.TABLE).exists()
        and (p.with_name(p.name[: -len("_3sets")]) / _view.TABLE).exists())
    bad = []
    for f in folders:
        parent = args.parent or f.with_name(f.name[: -len("_3sets")])
        bad += convert(f, parent, args.git_rm)
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
