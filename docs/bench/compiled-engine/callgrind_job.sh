#!/bin/bash
# callgrind_job.sh BUILD N: the instructions of one `fluvial bench hotpath` run of N records on the
# build in $BUILDS/BUILD/src (a patched, compiled copy of src/), or of the input alone when BUILD
# is "input". Run each build at two record counts; callgrind_per_record.py takes the difference.
b=$1; n=$2
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
BUILDS=${BUILDS:-/tmp/b}; OUT=${OUT:-$BUILDS/callgrind}
mkdir -p "$OUT"
if [ "$b" = input ]; then
  valgrind --tool=callgrind --callgrind-out-file="$OUT/input-$n.out" \
    "$repo/.venv/bin/python" "$here/input_only.py" "$n" > "$OUT/input-$n.log" 2>&1
else
  PYTHONPATH="$BUILDS/$b/src" valgrind --tool=callgrind --callgrind-out-file="$OUT/$b-$n.out" \
    "$repo/.venv/bin/fluvial" bench hotpath --workload figure2 --records "$n" --repeat 1 \
    > "$OUT/$b-$n.log" 2>&1
fi
