#!/usr/bin/env bash
# Sets up .venv, lints, and runs the whole test suite on both backends.
# The two backends run side by side (each mostly waits on one core for XLA
# compilation), each into its own log, printed when both are done.
# Usage: bash scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check .

logs="$(mktemp -d)"
start=$(date +%s)
pids=()
for backend in jax tensorflow; do
  KERAS_BACKEND="${backend}" .venv/bin/python -m pytest tests -q -p no:cacheprovider \
    --durations=15 "$@" >"${logs}/${backend}.log" 2>&1 &
  pids+=("$!")
done

status=0
for i in 0 1; do
  backend=$([ "$i" -eq 0 ] && echo jax || echo tensorflow)
  set +e
  wait "${pids[$i]}"
  code=$?
  set -e
  echo "=== KERAS_BACKEND=${backend} ==="
  cat "${logs}/${backend}.log"
  # pytest exits 5 when it collected no test: a suite that ran nothing is a
  # failure here, not a pass.
  if [ "${code}" -eq 5 ]; then
    echo "No tests were collected for KERAS_BACKEND=${backend}." >&2
  fi
  echo "=== KERAS_BACKEND=${backend}: exit ${code} ==="
  [ "${code}" -eq 0 ] || status=1
done
echo "Both backends took $(( $(date +%s) - start )) s."
exit "${status}"
