#!/usr/bin/env bash
# Sets up .venv, lints, and runs the whole test suite on JAX and TensorFlow
# (what CI runs); PyTorch on request, see below.
# The backends run side by side (JAX and TensorFlow each mostly wait on one
# core for XLA compilation; the torch suite runs eagerly on one thread, see
# tests/conftest.py), each into its own log, printed when all are done.
#
# Usage: bash scripts/test.sh [pytest arguments]
#   KERAS_BACKEND=torch bash scripts/test.sh   # one backend only
#   TEST_BACKENDS="jax tensorflow torch" bash scripts/test.sh   # all three
# The torch suite is not in CI's default list yet: its whole-suite time on
# the 2-core CI machine is unmeasured (issue #20). A torch that cannot be
# installed (no wheel for this platform) is reported and skipped when it
# was asked for in TEST_BACKENDS: JAX and TensorFlow still run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check .

if [ -n "${KERAS_BACKEND:-}" ]; then
  backends=("${KERAS_BACKEND}")
else
  read -r -a backends <<<"${TEST_BACKENDS:-jax tensorflow}"
fi
for backend in "${backends[@]}"; do
  if [ "${backend}" = torch ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
    start=$(date +%s)
    # The CPU wheel; constraints.txt pins the version.
    if bash scripts/setup.sh torch; then
      echo "Installed the torch extra in $(( $(date +%s) - start )) s."
    elif [ -n "${KERAS_BACKEND:-}" ]; then
      echo "Could not install the torch extra (KERAS_BACKEND=torch)." >&2
      exit 1
    else
      echo "Could not install the torch extra: testing JAX and TensorFlow only." >&2
      backends=(jax tensorflow)
    fi
  fi
done

logs="$(mktemp -d)"
start=$(date +%s)
pids=()
for backend in "${backends[@]}"; do
  KERAS_BACKEND="${backend}" .venv/bin/python -m pytest tests -q -p no:cacheprovider \
    --durations=15 "$@" >"${logs}/${backend}.log" 2>&1 &
  pids+=("$!")
done

status=0
for i in "${!backends[@]}"; do
  backend="${backends[$i]}"
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
echo "${backends[*]} took $(( $(date +%s) - start )) s side by side."
exit "${status}"
