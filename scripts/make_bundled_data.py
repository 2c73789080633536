"""Rebuild the small regression files bundled in ``riskopt/datasets/data`` from the originals.

Usage: ``RISKOPT_DATA=../shared/data python scripts/make_bundled_data.py``

Each original (UCI / OpenML file, see its PROVENANCE.md) is read with pandas and written as a
gzip CSV of full-precision floats, header = column names, in the original row order. The
loader reads these with NumPy only, so the core package needs no Excel readers.
"""
import gzip
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parents[1] / "src" / "riskopt" / "datasets" / "data"


def frames(root):
    root = Path(root)
    yacht = pd.read_csv(root / "yacht" / "yacht_hydrodynamics.data", sep=r"\s+", header=None,
                        names=["lc_position", "prismatic_coef", "length_displacement",
                               "beam_draught", "length_beam", "froude", "resistance"])
    energy = pd.read_excel(root / "energy" / "ENB2012_data.xlsx")
    concrete = pd.read_excel(root / "concrete" / "Concrete_Data.xls")
    kin8nm = pd.read_csv(root / "kin8nm" / "dataset_2175_kin8nm.csv")
    power = pd.read_excel(root / "power" / "Folds5x2_pp.xlsx", sheet_name="Sheet1")
    return {"yacht": yacht, "energy": energy, "concrete": concrete, "kin8nm": kin8nm,
            "power": power}


def main():
    root = os.environ.get("RISKOPT_DATA")
    if not root:
        sys.exit("set RISKOPT_DATA to the folder holding the original files")
    OUT.mkdir(parents=True, exist_ok=True)
    for name, df in frames(root).items():
        df = df.dropna(how="all")
        cols = [str(c).strip().replace(",", ";") for c in df.columns]
        arr = df.to_numpy(dtype=np.float64)
        with gzip.open(OUT / f"{name}.csv.gz", "wt", compresslevel=9) as fh:
            fh.write(",".join(cols) + "\n")
            for row in arr:
                fh.write(",".join(repr(float(v)) for v in row) + "\n")
        print(name, arr.shape)


if __name__ == "__main__":
    main()
