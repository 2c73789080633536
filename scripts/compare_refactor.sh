#!/usr/bin/env bash
# Same numbers before and after a change of the benchmark code: runs the specs below with the
# code of BASE (a git commit, default 1fd9759, the last commit before the one-schema runner) and
# with the working tree, then compares the long tables row by row (scripts/compare_results.py).
#   scripts/compare_refactor.sh [BASE] [OUT]        (about 6 minutes on 2 cores)
set -euo pipefail
BASE=${1:-1fd9759}
OUT=${2:-/tmp/riskopt_compare}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
export RISKOPT_DATA=${RISKOPT_DATA:-$ROOT/../shared/data}
SPECS="quick splplus_synthetic_quick splplus_real_quick prospect_fig3_short sorel_fig2_short"
rm -rf "$OUT"; mkdir -p "$OUT/old" "$OUT/new"
git -C "$ROOT" worktree add --detach "$OUT/base" "$BASE" >/dev/null
trap 'git -C "$ROOT" worktree remove --force "$OUT/base"' EXIT
spec_path() {  # the short specs are bundled only after the change: pass them as files
  case $1 in *_short) echo "$ROOT/src/riskopt/bench/specs/$1.toml" ;; *) echo "$1" ;; esac
}
run() {  # $1 = source tree, $2 = results folder
  for s in $SPECS; do
    PYTHONPATH="$1/src" NUMBA_CACHE_DIR="$OUT/numba_$(basename "$2")" "$PY" -c \
      "import sys, riskopt.bench as rb; r = rb.run(sys.argv[1], out=sys.argv[2], jobs=2, progress=False, plot=False); print(sys.argv[2], 'complete' if r.complete else 'INCOMPLETE', r.n_cells, 'cells', round(r.wall_seconds, 1), 's')" \
      "$(spec_path "$s")" "$2/$s"
  done
}
run "$OUT/base" "$OUT/old"
run "$ROOT" "$OUT/new"
"$PY" "$ROOT/scripts/compare_results.py" "$OUT/old" "$OUT/new"
