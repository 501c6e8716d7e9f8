"""`transformer_layout_map`: which Transformer variable gets which layout.

Only paths and shapes are involved (a `DeviceMesh` of device names is never
materialised), so this runs in the test process on every backend.
"""

import keras
import pytest

import keras_attn
from keras_attn.models import transformer_layout_map

MESH = keras.distribution.DeviceMesh(
    (2, 4), ("batch", "model"), [f"cpu:{i}" for i in range(8)]
)
CONFIG = dict(
    vocabulary_size=40,
    num_layers=2,
    hidden_dim=16,
    num_heads=4,
    intermediate_dim=24,
    max_sequence_length=12,
)


def make_model(**overrides):
    return keras_attn.models.Transformer(**{**CONFIG, **overrides})


def axes_by_path(model, layout_map):
    layouts = {}
    for variable in model.variables:
        layout = layout_map[variable.path]  # raises if two rules match
        axes = layout.axes if layout is not None else (None,) * len(variable.shape)
        assert len(axes) == len(variable.shape), variable.path
        layouts[variable.path] = (axes, tuple(variable.shape))
    return layouts


def sharded_sizes(layouts):
    """{path: size of the dimension sharded over "model"} for sharded variables."""
    return {
        path: shape[axes.index("model")]
        for path, (axes, shape) in layouts.items()
        if "model" in axes
    }


@pytest.mark.parametrize(
    "overrides",
    [{}, {"tie_embeddings": False, "position": "learned", "normalize_first": True}],
    ids=["tied", "untied_learned_prenorm"],
)
def test_megatron_rules_cover_attention_and_feed_forward(overrides):
    model = make_model(**overrides)
    layouts = axes_by_path(model, transformer_layout_map(MESH))
    sizes = sharded_sizes(layouts)
    heads, d_ff, vocabulary = 4, 24, 40
    # Only heads, d_ff and the vocabulary are ever split.
    assert set(sizes.values()) <= {heads, d_ff, vocabulary}
    # Per attention layer: q/k/v kernels and biases, the output kernel (7);
    # per feed-forward: inner kernel and bias, outer kernel (3). Encoder
    # blocks have 1 attention layer, decoder blocks 2 (self and cross).
    blocks = 2 * (7 + 3) + 2 * (2 * 7 + 3)
    embeddings = 1 if model.tie_embeddings else 2 + 2  # + logits kernel, bias
    assert len(sizes) == blocks + embeddings
    for path, (axes, _) in layouts.items():
        in_sublayer = "attention" in path or "feed_forward" in path
        if path.endswith("kernel") and in_sublayer:
            assert "model" in axes, path  # no projection left replicated
        if "norm" in path or "position" in path or "seed_generator" in path:
            assert "model" not in axes, path


def test_layouts_of_one_decoder_block():
    layouts = axes_by_path(make_model(), transformer_layout_map(MESH))
    prefix = "decoder_block_1/"
    expected = {
        "self_attention/query/kernel": (None, "model", None),
        "self_attention/value/bias": ("model", None),
        "self_attention/attention_output/kernel": ("model", None, None),
        "self_attention/attention_output/bias": (None,),
        "cross_attention/key/kernel": (None, "model", None),
        "cross_attention/attention_output/kernel": ("model", None, None),
        "feed_forward/intermediate_dense/kernel": (None, "model"),
        "feed_forward/intermediate_dense/bias": ("model",),
        "feed_forward/output_dense/kernel": ("model", None),
        "feed_forward/output_dense/bias": (None,),
        "feed_forward_norm/gamma": (None,),
    }
    for path, axes in expected.items():
        assert layouts[prefix + path][0] == axes, path
    assert layouts["token_embedding/token_embedding/embeddings"][0] == ("model", None)


def test_embedding_axis_choices():
    model = make_model(tie_embeddings=False)
    path = "decoder_embedding/token_embedding/embeddings"
    hidden = axes_by_path(model, transformer_layout_map(MESH, embedding_axis="hidden"))
    assert hidden[path][0] == (None, "model")
    assert hidden["logits/kernel"][0] == ("model", None)
    assert hidden["logits/bias"][0] == (None,)
    replicated = axes_by_path(model, transformer_layout_map(MESH, embedding_axis=None))
    assert replicated[path][0] == (None, None)
    assert replicated["logits/kernel"][0] == (None, None)


def test_rules_match_keras_multi_head_attention_too():
    # Same sub-layer names and kernel shapes as keras.layers.MultiHeadAttention.
    layer = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8, name="mha")
    layer.build((1, 3, 16), (1, 3, 16))
    layout_map = transformer_layout_map(MESH)
    assert layout_map["mha/query/kernel"].axes == (None, "model", None)
    assert layout_map["mha/value/bias"].axes == ("model", None)
    assert layout_map["mha/attention_output/kernel"].axes == ("model", None, None)
    assert layout_map["mha/attention_output/bias"] is None  # replicated


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="model_axis"):
        transformer_layout_map(MESH, model_axis="tensor")
    with pytest.raises(ValueError, match="embedding_axis"):
        transformer_layout_map(MESH, embedding_axis="rows")
