#!/usr/bin/env bash
# On a GPU machine, from the checkout's root, with .gpu/ beside it: a launcher .gpu/run
# that puts TensorRT-RTX and one wheel on the path (TORCHTRT_GPU_WHEEL=base or patched)
# and upstream's tests as .gpu/upstream-tests.tar.xz. Runs upstream's
# tests/py/dynamo/{lowering,runtime,partitioning,conversion}
# against the unpatched (base) and the patched RTX wheel, side by side, each with a
# per-test timeout and an overall deadline. Writes $OUT/upstream-{base,patched}.log
# (pytest -v lines) for tools/gpu/upstream_table.py to compare. pytest is exec'd so
# that the deadline's SIGINT reaches it (a shell in between swallowed it: the first
# run went on to the call's limit).
#   bash tools/gpu/upstream_compare.sh [DEADLINE_S] [DIRS...]
# UPSTREAM_PYTEST_ARGS adds pytest arguments to both runs (e.g. "-n 7": pytest-xdist,
# installed there; tools/gpu/upstream_table.py reads its lines too).
set -uo pipefail
deadline=${1:-480}; shift || true
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(lowering runtime partitioning conversion)
root=$(pwd)
bash .gpu/run true >/dev/null 2>&1  # unpack TensorRT-RTX once, before the parallel runs
for wheel in base patched; do
  (
    up=$(mktemp -d)
    tar -C "$up" -xJf .gpu/upstream-tests.tar.xz
    paths=(); for d in "${dirs[@]}"; do paths+=("tests/py/dynamo/$d"); done
    TORCHTRT_GPU_WHEEL=$wheel timeout -s INT "$deadline" bash "$root/.gpu/run" \
      bash -c "cd $up && exec python3 -m pytest -p no:cacheprovider -v --timeout 60 -o console_output_style=classic ${UPSTREAM_PYTEST_ARGS:-} ${paths[*]}" \
      > "$OUT/upstream-$wheel.log" 2>&1
    echo "$wheel: exit $?" >> "$OUT/upstream-exit.txt"
  ) &
done
wait
python3 tools/gpu/scrub_paths.py "$OUT"/upstream-*.log
cat "$OUT/upstream-exit.txt"
for wheel in base patched; do tail -2 "$OUT/upstream-$wheel.log"; done
