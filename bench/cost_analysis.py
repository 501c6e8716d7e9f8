"""XLA's own cost analysis of one training step: bytes accessed, fusions.

    python bench/cost_analysis.py                # the quick translation model
    python bench/cost_analysis.py --quick        # a tiny model (smoke run)

JAX only: the recipe's "quick" translation model (4 + 4 layers, d 128,
4 heads, ff 256, dropout 0.1, vocabulary 8000, label smoothing 0.1, the
paper's Adam and schedule, `MaskedAccuracy`) is compiled for one batch of
64 x 32 source and target tokens (2,048 each, the setting's token budget),
exactly as `fit` runs it: `jax.jit(model.train_step)` on the model's state.
No step is timed; the numbers are XLA's, after its optimisation passes, so
they do not move with the machine's load:

- `cost_analysis()`: FLOPs and bytes accessed (operands read and results
  written by each instruction XLA runs: a memory-bound pass over an
  activation counts once per pass);
- the same passes by model part: the operand and result bytes of each
  instruction of the entry computation, read from the HLO text (loop
  bodies left out), attributed to the parts of `bench/profile_step.py`;
- the optimised HLO: how many fusions the step runs, how many instructions
  of the entry computation are not fused (copies, dots, custom calls), and
  the largest fusions' share of the bytes.

Two parts are also compiled alone, forward and backward, with their bytes
against the least any implementation must move (inputs read once, results
written once): the post-norm sub-layer end `LayerNorm(x + Dropout(y))`
and the loss on the output projection (`logits = h W + b`, masked
cross-entropy with label smoothing).
"""

import argparse
import collections
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BATCH, LENGTH = 64, 32
QUICK_SHAPE = dict(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)


def cost(compiled):
    """`cost_analysis()` as one dict (older JAX returns a list of one)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0]
    return analysis


def entry_instructions(hlo_text):
    """The instruction lines of the optimised module's ENTRY computation."""
    lines, inside = [], False
    for line in hlo_text.splitlines():
        if line.startswith("ENTRY "):
            inside = True
            continue
        if inside:
            if line.startswith("}"):
                break
            if "=" in line:
                lines.append(line.strip())
    return lines


def opcode(instruction):
    """`fusion`, `copy`, `dot`, ... of one HLO instruction line."""
    right = instruction.split("=", 1)[1].strip()
    # "f32[64,32]{1,0} fusion(...)" or "(f32[..], ..) fusion(...)"
    match = re.search(r"\s([a-z][a-z0-9\-_]*)\(", " " + right)
    return match.group(1) if match else "?"


DTYPE_BYTES = dict(pred=1, s8=1, u8=1, s16=2, u16=2, f16=2, bf16=2, s32=4, u32=4)
DTYPE_BYTES.update(f32=4, s64=8, u64=8, f64=8)
SHAPE = re.compile(r"\b(" + "|".join(DTYPE_BYTES) + r")\[([\d,]*)\]")
NOT_PASSES = {"parameter", "tuple", "get-tuple-element", "constant", "bitcast"}


def shape_bytes(text):
    total = 0
    for dtype, dims in SHAPE.findall(text):
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += count * DTYPE_BYTES[dtype]
    return total


def bytes_by_part(hlo_text):
    """Bytes read and written by the entry's instructions, by model part.

    Operand and result shapes are read from the optimised HLO text (a pass
    over memory per instruction, as `cost_analysis` counts them); the part
    is `bench/profile_step.py`'s, from each instruction's op_name.
    """
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import profile_step

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "step.cpu_after_optimizations.txt"
        path.write_text(hlo_text)
        instructions = profile_step.read_instructions(directory)
    parts = collections.defaultdict(lambda: [0, 0])  # part -> [bytes, passes]
    result_bytes, rows = {}, []
    for line in entry_instructions(hlo_text):
        kind = opcode(line)
        name = line.removeprefix("ROOT ").split("=", 1)[0].strip().lstrip("%")
        head, _, rest = line.split("=", 1)[1].partition(kind + "(")
        result_bytes[name] = shape_bytes(head)
        rows.append((name, kind, rest.split(")", 1)[0]))
    for name, kind, operands in rows:
        if kind in NOT_PASSES:
            continue
        # Operands are named (`%fusion.3`), their shapes are their results'.
        read = sum(
            result_bytes.get(operand, 0)
            for operand in re.findall(r"%([\w.\-]+)", operands)
        )
        op_name, is_matmul = instructions.get(name, ("", False))
        part = profile_step.part_of(op_name, is_matmul)
        parts[part][0] += result_bytes[name] + read
        parts[part][1] += 1
    return dict(parts)


def print_parts(parts):
    total = sum(b for b, _ in parts.values())
    print(f"  {'part':<42}{'MB':>9}{'share':>8}{'instructions':>14}")
    for part, (size, count) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
        print(f"  {part:<42}{size / 1e6:>9.1f}{size / total:>8.1%}{count:>14}")
    print(f"  {'all (from the HLO text)':<42}{total / 1e6:>9.1f}")


def summarise(name, compiled, minimal_bytes=None):
    analysis = cost(compiled)
    hlo = compiled.as_text()
    entry = entry_instructions(hlo)
    kinds = collections.Counter(opcode(line) for line in entry)
    fusion_kinds = collections.Counter(
        match.group(1) for match in re.finditer(r"kind=(k[A-Za-z]+)", hlo)
    )
    ignored = {"parameter", "tuple", "get-tuple-element", "constant", "bitcast"}
    unfused = {k: v for k, v in kinds.items() if k not in ignored | {"fusion"}}
    line = (
        f"{name}: {analysis.get('flops', 0) / 1e9:.3f} GFLOP, "
        f"{analysis.get('bytes accessed', 0) / 1e6:.2f} MB accessed"
    )
    if minimal_bytes:
        ratio = analysis.get("bytes accessed", 0) / minimal_bytes
        line += f" ({ratio:.2f}x the least, {minimal_bytes / 1e6:.2f} MB)"
    print(line)
    print(
        f"  fusions: {kinds.get('fusion', 0)} in the entry computation "
        f"({', '.join(f'{k} {v}' for k, v in sorted(fusion_kinds.items()))} "
        f"in the module); other instructions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(unfused.items()))
    )
    passes = bytes_by_part(hlo)
    print(
        f"  one pass per top-level instruction (operands + results, from the "
        f"HLO text): {sum(b for b, _ in passes.values()) / 1e6:.2f} MB in "
        f"{sum(n for _, n in passes.values())} instructions"
    )
    return analysis, passes


def train_step_cost(args):
    import jax
    import keras
    import numpy as np

    import keras_attn
    from keras_attn_recipes.translation_config import SETTINGS
    from keras_attn_recipes.translation_steps import build_model

    # The quick setting's model as of 2026-11-24 (vocabulary 8000,
    # post-norm), which docs/performance.md measures before and after;
    # pinned so that later changes to the setting leave the series
    # comparable.
    config = SETTINGS["quick"].replace(vocabulary_size=8000, normalize_first=False)
    if args.quick:
        config = config.replace(**QUICK_SHAPE, vocabulary_size=200, train_steps=1)
    keras.utils.set_random_seed(0)
    model = build_model(config, config.vocabulary_size)
    batch, length = (4, 8) if args.quick else (BATCH, LENGTH)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, config.vocabulary_size, (3, batch, length))
    # End padding: row lengths drawn from half to full.
    keep = np.arange(length)[None] < rng.integers(length // 2, length + 1, (batch, 1))
    tokens = np.where(keep[None], tokens, 0).astype("int32")
    x = {"encoder_tokens": tokens[0], "decoder_tokens": tokens[1]}
    y = tokens[2]
    model.train_on_batch(x, y)  # builds the optimizer and metrics
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    compiled = jax.jit(model.train_step).lower(state, (x, y)).compile()
    print(
        f"keras_attn {keras_attn.__version__}, jax {jax.__version__}, "
        f"device {jax.devices()[0].platform}"
    )
    print(
        f"model: {config.num_layers}+{config.num_layers} layers, d "
        f"{config.hidden_dim}, ff {config.intermediate_dim}, vocabulary "
        f"{config.vocabulary_size}; batch {batch} x {length}; "
        f"{model.count_params():,} parameters"
    )
    _, passes = summarise("train step", compiled)
    print_parts(passes)
    return compiled


def part_costs(args):
    import jax
    import keras
    import numpy as np

    from keras_attn.layers import FastDropout, layer_norm
    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    batch, length = (4, 8) if args.quick else (BATCH, LENGTH)
    d, vocabulary = (16, 200) if args.quick else (128, 8000)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, length, d)).astype("float32")
    y = rng.standard_normal((batch, length, d)).astype("float32")

    dropout = FastDropout(0.1, seed=0)
    norm = keras.layers.LayerNormalization(epsilon=1e-5)
    norm.build((batch, length, d))
    gamma, beta = norm.gamma.value, norm.beta.value
    seed = dropout.seed_generator.state.value

    def keras_attn_dropout(y, seed):
        from keras_attn.layers.fast_dropout import fast_dropout

        return fast_dropout(y, 0.1, seed=seed)

    def sublayer_end(normalize):
        def step(x, y, gamma, beta, seed):
            def forward(x, y, gamma, beta):
                z = x + keras_attn_dropout(y, seed)
                return normalize(z, gamma, beta).sum()

            return jax.grad(forward, argnums=(0, 1, 2, 3))(x, y, gamma, beta)

        return step

    # Inputs x, y read, grads of x, y written; gamma, beta negligible.
    least = 4 * x.nbytes
    norms = {
        # What `keras.layers.LayerNormalization` computes.
        "keras.ops.layer_normalization": lambda z, gamma, beta: (
            keras.ops.layer_normalization(z, gamma, beta, epsilon=1e-5)
        ),
        # The blocks' `LayerNorm`: the same values, a written-out gradient.
        "keras_attn.layers.layer_norm": lambda z, gamma, beta: layer_norm(
            z, gamma, beta, epsilon=1e-5
        ),
    }
    for name, normalize in norms.items():
        step = sublayer_end(normalize)
        compiled = jax.jit(step).lower(x, y, gamma, beta, seed).compile()
        _, passes = summarise(
            f"LayerNorm(x + Dropout(y)) with {name}, forward + backward",
            compiled,
            least,
        )
        print_parts(passes)

    loss_fn = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    h = x
    kernel = (rng.standard_normal((d, vocabulary)) * 0.02).astype("float32")
    bias = np.zeros((vocabulary,), "float32")
    labels = rng.integers(0, vocabulary, (batch, length)).astype("int32")

    def loss_and_grads(h, kernel, bias):
        def forward(h, kernel, bias):
            return loss_fn(labels, h @ kernel + bias)

        return jax.value_and_grad(forward, argnums=(0, 1, 2))(h, kernel, bias)

    # h and the kernel read, their grads written; the logits need never
    # reach memory in an ideal (blockwise) implementation.
    least = 2 * (h.nbytes + kernel.nbytes)
    compiled = jax.jit(loss_and_grads).lower(h, kernel, bias).compile()
    logits_mb = batch * length * vocabulary * 4 / 1e6
    _, passes = summarise(
        f"loss on the output projection, forward + backward (logits "
        f"{logits_mb:.1f} MB)",
        compiled,
        least,
    )
    print_parts(passes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model")
    parser.add_argument(
        "--dump-hlo", type=Path, default=None, help="write the step's optimised HLO"
    )
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    compiled = train_step_cost(args)
    if args.dump_hlo:
        args.dump_hlo.write_text(compiled.as_text())
    part_costs(args)


if __name__ == "__main__":
    main()
