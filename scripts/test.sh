#!/usr/bin/env bash
# Sets up .venv, lints, and runs the whole test suite on both backends.
# Usage: bash scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check .

status=0
for backend in jax tensorflow; do
  echo "=== KERAS_BACKEND=${backend} ==="
  start=$(date +%s)
  set +e
  KERAS_BACKEND="${backend}" .venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
  code=$?
  set -e
  echo "=== KERAS_BACKEND=${backend}: exit ${code} in $(( $(date +%s) - start )) s ==="
  # pytest exits 5 when it collected no test: a suite that ran nothing is a
  # failure here, not a pass.
  if [ "${code}" -eq 5 ]; then
    echo "No tests were collected for KERAS_BACKEND=${backend}." >&2
  fi
  [ "${code}" -eq 0 ] || status=1
done
exit "${status}"
