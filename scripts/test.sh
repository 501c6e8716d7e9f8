#!/usr/bin/env bash
# Sets up .venv, lints, and runs the test suite on JAX, TensorFlow and
# PyTorch (what CI runs).
# The backends run side by side (JAX and TensorFlow each mostly wait on one
# core for XLA compilation; the torch suite runs eagerly on one thread, see
# tests/conftest.py), each into its own log, printed when all are done.
#
# Usage: bash scripts/test.sh [pytest arguments]
#   KERAS_BACKEND=torch bash scripts/test.sh   # one backend, the whole suite
#   TEST_BACKENDS="jax tensorflow" bash scripts/test.sh   # a choice
# Run side by side with the other two, the torch suite leaves out the tests
# marked `slow` (end-to-end recipe runs, exports, cross-backend files; they
# run on JAX and TensorFlow, and the cross-backend ones load torch files
# there) but those shared out to it (`split_backend("torch")`, its share
# of the `split_cases` tests): three
# whole suites do not fit CI's 35 minutes on 2 cores.
# `KERAS_BACKEND=torch` alone runs all of it. A torch that cannot be
# installed (no wheel for this platform) is reported and skipped: JAX and
# TensorFlow still run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check .

if [ -n "${KERAS_BACKEND:-}" ]; then
  backends=("${KERAS_BACKEND}")
else
  read -r -a backends <<<"${TEST_BACKENDS:-jax tensorflow torch}"
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

# Side by side, the tests of backend-independent code (the recipes' and
# benchmarks' command lines, the documentation's examples; minutes each)
# are shared out: each runs on the one backend its `split_backend` marker
# names, or the first of these when that one is not tested
# (tests/conftest.py).
if [ "${#backends[@]}" -gt 1 ]; then
  export KERAS_ATTN_SPLIT_BACKENDS="${backends[*]}"
fi

logs="$(mktemp -d)"
start=$(date +%s)
pids=()
for backend in "${backends[@]}"; do
  selection=()
  if [ "${backend}" = torch ] && [ "${#backends[@]}" -gt 1 ]; then
    selection=(-m "not slow or split_backend or split_cases")
  fi
  KERAS_BACKEND="${backend}" .venv/bin/python -m pytest tests -q -p no:cacheprovider \
    --durations=15 "${selection[@]}" "$@" >"${logs}/${backend}.log" 2>&1 &
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
