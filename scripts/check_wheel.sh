#!/usr/bin/env bash
# Builds the wheel, installs it with the jax and text extras into a fresh
# virtual environment in a temporary directory, and, from outside the
# checkout, runs `keras-attn-translate --help`, loads the Multi30k text,
# saves and loads a tiny preset, and loads every shipped trained preset
# (`multi30k_en_de` translates a sentence). Takes a few minutes (the extras
# install TensorFlow and JAX; pip may use its cache and PyPI), so it is not
# part of every test run.
# Usage: bash scripts/check_wheel.sh   (PYTHON=python3.11 to choose the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
start=$(date +%s)

"${python}" -m venv "${work}/venv"
venv_python="${work}/venv/bin/python"
"${venv_python}" -m pip install --quiet --upgrade pip
"${venv_python}" -m pip wheel --quiet --no-deps --wheel-dir "${work}/dist" "${repo}"
wheel="$(ls "${work}"/dist/keras_attn-*.whl)"
echo "Built $(basename "${wheel}") ($(du -h "${wheel}" | cut -f1))."
"${venv_python}" -m pip install --quiet -c "${repo}/constraints.txt" "${wheel}[jax,text]"

cd "${work}"  # outside the checkout: only the installed package can be found
export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3
"${work}/venv/bin/keras-attn-translate" --help | head -3
"${work}/venv/bin/keras-attn-translate" save-preset --help | head -1
"${venv_python}" - <<'EOF'
import os
from pathlib import Path

import keras
import keras_attn
from keras_attn.models import Transformer, list_presets
from keras_attn.text import SubwordTokenizer, Translator, load_multi30k

assert "site-packages" in keras_attn.__file__, keras_attn.__file__
assert not Path("keras_attn").exists()
sources, targets = load_multi30k("val")
print(f"load_multi30k('val'): {len(sources)} pairs.")

# A tiny preset, saved and loaded by the installed package.
tokenizer = SubwordTokenizer.train(sources[:200] + targets[:200], 120)
model = Transformer.from_preset("transformer_tiny", vocabulary_size=120)
model.save_to_preset("tiny_preset", tokenizer=tokenizer, weights_dtype="float16")
translator = Translator.from_preset("tiny_preset", strategy="greedy")
print("tiny preset:", translator.translate(["A dog runs."]))

trained = [
    name
    for name, info in list_presets().items()
    if info["weights"] and info["model"] == "Transformer"
]
print("trained presets:", trained)
for name in trained:
    print(name, "->", Translator.from_preset(name).translate(["A dog runs."]))
print("keras", keras.__version__, "backend", keras.backend.backend())
EOF
echo "check_wheel: OK in $(( $(date +%s) - start )) s."
