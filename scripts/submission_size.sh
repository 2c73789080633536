#!/usr/bin/env bash
# Estimate a submission's diff size, as the workplace limits it (256 MiB of diffs, 512 MiB packed):
# for every commit in BASE..REF, the bytes of every blob removed and added (a modification counts
# old + new), summed over commits. usage: BASE=<last landed commit> scripts/submission_size.sh [REF]
REF=${1:-HEAD}; BASE=${BASE:-6a37f815}
tot=0
for c in $(git rev-list --no-merges $BASE..$REF); do
  # old and new blob ids of every changed path
  s=$(git diff-tree -r --no-commit-id --root -M0 $c^ $c 2>/dev/null | awk '{print $3"\n"$4}' | grep -v '^0\{40\}$' | git cat-file --batch-check='%(objectsize)' | awk '{s+=$1} END {print s+0}')
  tot=$((tot + s))
done
echo "diff bytes (old+new blobs of every changed file, all commits): $tot ($((tot/1048576)) MiB); limit 256 MiB"
echo "pack estimate: $(git rev-list --objects $BASE..$REF | cut -d' ' -f1 | git cat-file --batch-check='%(objectsize:disk)' 2>/dev/null | awk '{s+=$1} END {print int(s/1048576)}') MiB (limit 512 MiB)"
