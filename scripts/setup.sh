#!/usr/bin/env bash
# Creates .venv (once) and installs keras-attn with the given extras.
# Usage: bash scripts/setup.sh [extras]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-all}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# constraints.txt pins the versions CI runs; pyproject.toml allows ranges.
.venv/bin/python -m pip install --quiet -c constraints.txt --editable ".[${extras}]"
