#!/usr/bin/env bash
# The CLI walked as a user would, on the raw UCI adult tables (issue 13: categoricals, a group
# column, evaluate, predict with ids), default settings otherwise.
#
#     bash scripts/cli_walk_adult.sh [OUT]      (default OUT: benchmarks/results/cli_adult)
#
# Reads $RISKOPT_DATA/adult/adult.{data,test}.gz (no header; ' ?' for missing values), writes
# train.csv / test.csv with a header and a person_id column into a temporary folder, then runs
# `riskopt fit` (the default risk, CVaR 0.5, and the degenerate CVaR 0.1), `riskopt evaluate`
# and `riskopt predict` and keeps their full output (and the
# first lines of the predictions) in OUT/transcript.txt, with the commit in OUT/metadata.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/benchmarks/results/cli_adult}
data=${RISKOPT_DATA:?set RISKOPT_DATA to the data folder (../shared/data)}
py=${PYTHON:-python}
riskopt=("$py" -c "import sys; from riskopt.cli import main; sys.exit(main())")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

"$py" - "$data/adult" "$work" <<'EOF'
import sys
import pandas as pd
src, dst = sys.argv[1], sys.argv[2]
cols = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
        "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
        "hours_per_week", "native_country", "income"]
for name, skip, start in (("train", 0, 1), ("test", 1, 100001)):
    df = pd.read_csv(f"{src}/adult.{'data' if name == 'train' else 'test'}.gz", header=None,
                     names=cols, skiprows=skip, skipinitialspace=True, na_values="?")
    df = df.dropna(subset=["income"])
    df["income"] = df["income"].str.rstrip(".")  # the test file writes '>50K.'
    df.insert(0, "person_id", range(start, start + len(df)))
    df.to_csv(f"{dst}/{name}.csv", index=False)
    print(f"{name}.csv: {len(df)} rows, {df.shape[1]} columns, "
          f"{int(df.isna().any(axis=1).sum())} rows with a missing value")
EOF

{
  echo "\$ riskopt fit train.csv --target income --group race --drop person_id --out model.joblib"
  "${riskopt[@]}" fit "$work/train.csv" --target income --group race --drop person_id \
    --out "$work/model.joblib" 2>&1
  echo
  echo "\$ riskopt fit train.csv --target income --group race --drop person_id --risk cvar:0.5 --out model_cvar.joblib"
  "${riskopt[@]}" fit "$work/train.csv" --target income --group race --drop person_id \
    --risk cvar:0.5 --out "$work/model_cvar.joblib" 2>&1
  echo
  echo "\$ riskopt fit train.csv --target income --drop person_id --risk cvar:0.1 --out model_tail.joblib"
  echo "# (the logistic CVaR of the worst 10 %: w = 0 is optimal, a degenerate model that is reported)"
  "${riskopt[@]}" fit "$work/train.csv" --target income --drop person_id \
    --risk cvar:0.1 --out "$work/model_tail.joblib" 2>&1
  echo
  echo "\$ riskopt evaluate model.joblib test.csv --sensitive race"
  "${riskopt[@]}" evaluate "$work/model.joblib" "$work/test.csv" --sensitive race 2>&1
  echo
  echo "\$ riskopt predict model.joblib test.csv --id-column person_id --out predictions.csv"
  "${riskopt[@]}" predict "$work/model.joblib" "$work/test.csv" --id-column person_id \
    --out "$work/predictions.csv" 2>&1
  echo "\$ head -4 predictions.csv; wc -l predictions.csv"
  head -4 "$work/predictions.csv"
  wc -l < "$work/predictions.csv"
} | sed "s#$work/##g" > "$out/transcript.txt"
{
  echo "script: scripts/cli_walk_adult.sh"
  echo "commit: $(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "python: $("$py" -c 'import sys, riskopt; print(sys.version.split()[0], riskopt.__file__)')"
} > "$out/metadata.txt"
cat "$out/transcript.txt"
