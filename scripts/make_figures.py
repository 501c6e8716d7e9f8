"""Draws the documentation's figures from real computation.

    python scripts/make_figures.py                      # all figures
    python scripts/make_figures.py --run-dir runs/full  # recipe plots from another run

Writes into `docs/figures/`:

- `architecture.png`: Figure 1 of the paper, drawn from a model built from a
  preset (`transformer_base` by default): the sub-layers of each block come
  from the model's variable paths, with their parameter counts.
- `learning_rate.png`: `keras_attn.training.TransformerSchedule` (equation 3)
  for the base and big models, `warmup_steps=4000`.
- `positional_encoding.png`: `keras_attn.layers.SinusoidalPositionEncoding`
  for `d_model=512` (section 3.5).
- `translation_cross_attention.png` and `translation_learning_curves.png`:
  copied from a run of `recipes/translate_multi30k.py` (`--run-dir`), if that
  run has made them.

Needs matplotlib (`pip install "keras-attn[recipes]"`). Building the base
model takes a few seconds and about 1 GB of memory.
"""

import argparse
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import keras  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import keras_attn  # noqa: E402

# Colours of the paper's Figure 1.
COLOURS = {
    "attention": "#fcd9a6",
    "norm": "#f5f0a3",
    "feed_forward": "#c6e2f5",
    "embedding": "#f6c6c6",
    "output": "#d5ead0",
}
# Files a recipe run directory may hold, and their names under docs/figures.
RUN_FIGURES = {
    "cross_attention.png": "translation_cross_attention.png",
    "learning_curves.png": "translation_learning_curves.png",
}


def _millions(count):
    return f"{count / 1e6:.2f}M" if count >= 1e5 else f"{count:,}"


def sublayers(block):
    """`[(name, parameter_count)]` of a block, in the order they were built.

    Read from the variable paths (`encoder_block_0/self_attention/query/kernel`),
    so the figure shows whatever the block really holds.
    """
    counts = {}
    for variable in block.weights:
        parts = variable.path.split("/")
        name = parts[parts.index(block.name) + 1]
        counts[name] = counts.get(name, 0) + int(np.prod(variable.shape))
    return list(counts.items())


def _title(name, block_kind, normalize_first):
    if name.endswith("_norm"):
        return "Norm (pre-norm)" if normalize_first else "Add & Norm"
    if name == "self_attention":
        if block_kind == "decoder":
            return "Masked Multi-Head Attention"
        return "Multi-Head Attention"
    if name == "cross_attention":
        return "Multi-Head Attention (encoder-decoder)"
    if name == "feed_forward":
        return "Feed Forward"
    return name


def _kind(name):
    if name.endswith("_norm"):
        return "norm"
    if "attention" in name:
        return "attention"
    if name == "feed_forward":
        return "feed_forward"
    return "output"


def _box(axis, x, y, width, height, text, colour, fontsize=8.5):
    axis.add_patch(
        FancyBboxPatch(
            (x - width / 2, y),
            width,
            height,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=colour,
            edgecolor="#444444",
            linewidth=1.0,
        )
    )
    axis.text(x, y + height / 2, text, ha="center", va="center", fontsize=fontsize)
    return y + height


def _arrow(axis, start, end, **kwargs):
    axis.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=10,
            color="#444444",
            linewidth=1.0,
            **kwargs,
        )
    )


def draw_architecture(model, preset, path):
    """Figure 1 of the paper from a built `keras_attn.models.Transformer`."""
    hidden, heads = model.hidden_dim, model.num_heads
    head_dim = hidden // heads
    details = {
        "attention": f"h={heads}, d_k=d_v={head_dim}",
        "feed_forward": f"d_ff={model.intermediate_dim}",
        "norm": "LayerNorm",
    }
    columns = {
        "encoder": (2.3, model.encoder_blocks),
        "decoder": (6.7, model.decoder_blocks),
    }
    figure, axis = plt.subplots(figsize=(9.2, 10.5))
    width, height, gap = 3.4, 0.62, 0.28
    tops = {}
    cross_attention_y = None
    for kind, (x, blocks) in columns.items():
        y = 0.0
        axis.text(x, y, f"{kind}_tokens", ha="center", va="bottom", fontsize=9)
        y += 0.35
        _arrow(axis, (x, y), (x, y + gap))
        y += gap
        embedding = model.token_embedding
        shared = " (shared)" if model.tie_embeddings else ""
        y = _box(
            axis,
            x,
            y,
            width,
            height * 1.25,
            f"Embedding{shared} x sqrt(d_model)\n+ {model.position} positions\n"
            f"{embedding.name}: {model.vocabulary_size:,} x {hidden}",
            COLOURS["embedding"],
        )
        _arrow(axis, (x, y), (x, y + gap))
        y += gap
        block_bottom = y
        y += 0.15
        for index, (name, count) in enumerate(sublayers(blocks[0])):
            if index:
                _arrow(axis, (x, y - gap), (x, y))
            kind_of_layer = _kind(name)
            label = _title(name, kind, model.normalize_first)
            detail = details.get(kind_of_layer, "")
            y = _box(
                axis,
                x,
                y,
                width,
                height,
                f"{label}\n{name}: {detail}, {_millions(count)} params",
                COLOURS[kind_of_layer],
                fontsize=7.8,
            )
            if name == "cross_attention":
                cross_attention_y = y - height / 2
            y += gap
        y -= gap - 0.15
        block_count = sum(
            int(np.prod(v.shape)) for block in blocks for v in block.weights
        )
        axis.add_patch(
            FancyBboxPatch(
                (x - width / 2 - 0.2, block_bottom),
                width + 0.4,
                y - block_bottom,
                boxstyle="round,pad=0.02,rounding_size=0.15",
                facecolor="none",
                edgecolor="#888888",
                linewidth=1.2,
            )
        )
        side = -1 if kind == "encoder" else 1
        axis.text(
            x + side * (width / 2 + 0.35),
            (block_bottom + y) / 2,
            f"N = {len(blocks)}\n{_millions(block_count)}",
            ha="right" if side < 0 else "left",
            va="center",
            fontsize=10,
        )
        tops[kind] = y
    # Encoder output feeds every decoder block's cross-attention.
    encoder_x, decoder_x = columns["encoder"][0], columns["decoder"][0]
    top = tops["encoder"]
    axis.plot([encoder_x, encoder_x], [top, top + 0.3], color="#444444", lw=1.0)
    axis.plot(
        [encoder_x, (encoder_x + decoder_x) / 2],
        [top + 0.3, top + 0.3],
        color="#444444",
        lw=1.0,
    )
    middle = (encoder_x + decoder_x) / 2
    axis.plot([middle, middle], [top + 0.3, cross_attention_y], color="#444444", lw=1.0)
    _arrow(
        axis, (middle, cross_attention_y), (decoder_x - width / 2, cross_attention_y)
    )
    axis.text(
        (middle + decoder_x - width / 2) / 2,
        cross_attention_y + 0.08,
        "K, V",
        fontsize=7.5,
        ha="center",
    )
    # Output projection (tied to the embedding) and softmax.
    y = tops["decoder"]
    _arrow(axis, (decoder_x, y), (decoder_x, y + gap))
    y += gap
    projection = (
        f"Linear = {model.token_embedding.name}^T (tied)"
        if model.tie_embeddings
        else "Linear (logits)"
    )
    y = _box(axis, decoder_x, y, width, height, projection, COLOURS["output"])
    _arrow(axis, (decoder_x, y), (decoder_x, y + gap))
    y += gap
    y = _box(axis, decoder_x, y, width, height, "Softmax", COLOURS["output"])
    axis.text(
        decoder_x,
        y + 0.15,
        f"next-token probabilities ({model.vocabulary_size:,})",
        ha="center",
        va="bottom",
        fontsize=9,
    )
    axis.set_title(
        f"keras_attn.models.Transformer.from_preset({preset!r}, "
        f"vocabulary_size={model.vocabulary_size})\n"
        f"{model.count_params():,} parameters, d_model={hidden}",
        fontsize=10,
    )
    axis.set_xlim(-0.6, 9.6)
    axis.set_ylim(-0.3, y + 0.8)
    axis.axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_learning_rate(path, total_steps=100_000):
    """Equation (3) for the base and big models, as Keras computes it."""
    steps = np.arange(total_steps)
    figure, axis = plt.subplots(figsize=(7.5, 4))
    for d_model, style in ((512, "-"), (1024, "--")):
        schedule = keras_attn.training.TransformerSchedule(d_model, warmup_steps=4000)
        rates = keras.ops.convert_to_numpy(schedule(steps))
        axis.plot(steps, rates, style, label=f"d_model={d_model}, warmup_steps=4000")
        peak = int(np.argmax(rates))
        axis.annotate(
            f"peak {rates[peak]:.2e}\nat step {peak + 1}",
            (peak, rates[peak]),
            xytext=(peak + 9000, rates[peak] * 0.97),
            fontsize=8,
            arrowprops={"arrowstyle": "->", "lw": 0.8},
        )
    axis.set_xlabel("training step")
    axis.set_ylabel("learning rate")
    axis.set_title("keras_attn.training.TransformerSchedule (equation 3)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def draw_positional_encoding(path, length=100, d_model=512):
    """Section 3.5's encodings, computed by the layer."""
    layer = keras_attn.layers.SinusoidalPositionEncoding()
    encoding = keras.ops.convert_to_numpy(layer(np.zeros((1, length, d_model))))[0]
    half = d_model // 2
    # The layer interleaves sin (even features) and cos (odd); side by side
    # the frequency bands are easier to see.
    sines, cosines = encoding[:, 0::2], encoding[:, 1::2]
    figure, (heat, lines) = plt.subplots(
        1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1.4, 1]}
    )
    image = heat.imshow(
        np.concatenate([sines, cosines], axis=1),
        cmap="RdBu",
        vmin=-1,
        vmax=1,
        aspect="auto",
        interpolation="none",
    )
    heat.axvline(half - 0.5, color="black", linewidth=0.8)
    heat.set_xticks([0, half // 2, half, half + half // 2])
    heat.set_xticklabels(["i=0", f"i={half // 2}", "i=0", f"i={half // 2}"])
    heat.set_xlabel("PE(pos, 2i) = sin  |  PE(pos, 2i+1) = cos")
    heat.set_ylabel("position")
    heat.set_title(f"SinusoidalPositionEncoding, d_model={d_model}")
    figure.colorbar(image, ax=heat, fraction=0.046)
    for pair in (0, 32, 64, 96):
        wavelength = 2 * np.pi * 10000 ** (2 * pair / d_model)
        lines.plot(sines[:, pair], label=f"2i={2 * pair} (wavelength {wavelength:.0f})")
    lines.set_xlabel("position")
    lines.set_title("PE(pos, 2i) for a few i")
    lines.legend(fontsize=8, loc="lower left")
    lines.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def copy_run_figures(run_dir, output_dir):
    """Copies the recipe's attention map and learning curves, if present."""
    copied = []
    for source_name, target_name in RUN_FIGURES.items():
        source = run_dir / source_name
        if source.is_file():
            shutil.copyfile(source, output_dir / target_name)
            copied.append(target_name)
        else:
            print(
                f"skipped {target_name}: {source} does not exist (run "
                "`bash scripts/translate.sh` first)",
                file=sys.stderr,
            )
    return copied


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="transformer_base")
    parser.add_argument("--vocabulary-size", type=int, default=37000)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/multi30k_quick"))
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "docs/figures")
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    written = []

    model = keras_attn.models.Transformer.from_preset(
        args.preset, vocabulary_size=args.vocabulary_size
    )
    draw_architecture(model, args.preset, args.output_dir / "architecture.png")
    written.append("architecture.png")
    del model
    draw_learning_rate(args.output_dir / "learning_rate.png")
    written.append("learning_rate.png")
    draw_positional_encoding(args.output_dir / "positional_encoding.png")
    written.append("positional_encoding.png")
    written += copy_run_figures(args.run_dir, args.output_dir)
    for name in written:
        print(args.output_dir / name)


if __name__ == "__main__":
    main()
