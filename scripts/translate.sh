#!/usr/bin/env bash
# The main job: set up .venv, train a small English-to-German Transformer on
# the bundled Multi30k data (about 10 minutes on 2 CPU cores), print its BLEU
# on test_2016_flickr and a few translations.
# Usage: bash scripts/translate.sh [extra recipe arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "jax,recipes"
export KERAS_BACKEND="${KERAS_BACKEND:-jax}"
exec .venv/bin/python recipes/translate_multi30k.py all --setting quick \
  --output-dir runs/multi30k_quick "$@"
