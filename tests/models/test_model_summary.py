"""`model.summary()` of every zoo model names the paper's parts.

Every top-level node is a layer with a name chosen by the model (no
`keras.ops` call, whose node gets an auto-generated name such as
`not_equal_4` or `get_item`), and the tied embedding's row
shows its lookup's output shape, not the logits of its reverse call.
"""

import re

import keras
import pytest
from zoo_cases import VOCABULARY_SIZE, make_model

HIDDEN_DIM = 32  # the tiny presets' `hidden_dim`

# (model kind, preset overrides) -> names the summary must show.
EXPECTED_NAMES = {
    ("transformer", ()): [
        "encoder_tokens",
        "decoder_tokens",
        "token_embedding",
        "encoder_embedding_dropout",
        "encoder_padding_mask",
        "encoder_block_0",
        "decoder_embedding_dropout",
        "decoder_padding_mask",
        "decoder_block_0",
        "logits",
    ],
    ("transformer", (("tie_embeddings", False), ("normalize_first", True))): [
        "encoder_embedding",
        "decoder_embedding",
        "encoder_padding_mask",
        "decoder_padding_mask",
        "encoder_output_norm",
        "decoder_output_norm",
        "logits",
    ],
    ("lm", ()): [
        "token_ids",
        "token_embedding",
        "embedding_dropout",
        "padding_mask",
        "decoder_block_0",
        "output_norm",
        "logits",
    ],
    ("classifier", ()): [
        "token_ids",
        "token_embedding",
        "embedding_norm",
        "padding_mask",
        "encoder_block_0",
        "pooling",
        "pooled_dropout",
        "logits",
    ],
    ("classifier", (("pooling", "mean"),)): ["padding_mask", "pooling", "logits"],
    ("vit", ()): [
        "images",
        "patch_embedding",
        "patch_sequence",
        "class_token",
        "position_embedding",
        "add_position_embedding",
        "embedding_dropout",
        "encoder_block_0",
        "output_norm",
        "class_token_output",
        "logits",
    ],
}
# What the ops the models used to leave at the top level were called.
OP_NAMES = ("not_equal", "get_item", "reshape", "add", "cast", "multiply", "sum")


def _summary_rows(model):
    """`{layer name: (type, output shape)}` from the printed summary.

    A table row may wrap over several lines (long type names): its cells
    are joined first.
    """
    lines = []
    model.summary(line_length=120, print_fn=lambda line, **kwargs: lines.append(line))
    rows, cells = {}, None
    for line in "\n".join(lines).splitlines():
        if line.startswith("│"):
            parts = [part.strip() for part in line.strip("│").split("│")]
            if cells is None:
                cells = [[] for _ in parts]
            for cell, part in zip(cells, parts):
                cell.append(part)
        elif cells is not None:  # a separator line ends the row
            name_and_type = " ".join(filter(None, cells[0]))
            match = re.fullmatch(r"(\S+) \((\w+)\)", name_and_type)
            assert match, f"unreadable summary row: {cells}"
            rows[match.group(1)] = (match.group(2), "".join(cells[1]))
            cells = None
    return rows


def _bare_ops(model):
    """The graph's nodes that are ops (`keras.ops` calls), not layers."""
    return [
        operation.name
        for operation in model.operations
        if not isinstance(operation, keras.layers.Layer)
    ]


@pytest.mark.parametrize(
    "kind, overrides", list(EXPECTED_NAMES), ids=lambda x: str(x or "default")
)
def test_summary_names_the_papers_parts(kind, overrides):
    model = make_model(kind, **dict(overrides))
    assert not _bare_ops(model), f"ops at the top level: {_bare_ops(model)}"
    rows = _summary_rows(model)
    assert len(rows) == len(model.operations), rows
    for name in rows:
        base = re.sub(r"_\d+$", "", name)
        assert base not in OP_NAMES, f"op name {name!r} in the summary"
    missing = [name for name in EXPECTED_NAMES[kind, overrides] if name not in rows]
    assert not missing, f"not in the summary: {missing}; rows: {sorted(rows)}"


@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_tied_embedding_row_shows_the_lookup_not_the_logits(kind):
    rows = _summary_rows(make_model(kind))
    assert rows["token_embedding"] == (
        "TokenAndPositionEmbedding",
        f"(None, None, {HIDDEN_DIM})",
    )
    assert rows["logits"] == (
        "TiedVocabularyProjection",
        f"(None, None, {VOCABULARY_SIZE})",
    )


def test_the_name_check_can_fail():
    tokens = keras.Input((None,), dtype="int32")
    mask = keras.ops.not_equal(tokens, 0)
    model = keras.Model(tokens, keras.ops.cast(mask, "float32"))
    bare = [re.sub(r"_\d+$", "", name) for name in _bare_ops(model)]
    assert bare == ["not_equal", "cast"]
    assert {"not_equal", "cast"} <= {
        re.sub(r"_\d+$", "", name) for name in _summary_rows(model)
    }
