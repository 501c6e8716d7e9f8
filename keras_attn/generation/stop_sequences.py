"""Stop sequences: a hypothesis ends once its generated tokens end with one.

A stop sequence is a tuple of token ids. The decoding loop
(`decoding_loop.advance`) checks, after every step, whether the last
tokens of each hypothesis equal a stop sequence and were all generated
(none of them is a prompt or prefix token); the sequence stays in the
output, as an end id does. One comparison per stop sequence on a window of
static width, so the check runs inside the compiled loop.
"""

from keras import ops

from keras_attn.validation import check_token_id


def check_stop_sequences(stop_sequences, vocabulary_size, pad_id=None):
    """`stop_sequences` as a tuple of tuples of ints, checked.

    Each must be a non-empty list of ids of the vocabulary, none of them
    the padding id (padding is never generated). `None` gives `()`.
    """
    if stop_sequences is None:
        return ()
    if isinstance(stop_sequences, (str, bytes)) or not isinstance(
        stop_sequences, (list, tuple)
    ):
        raise TypeError(
            "`stop_sequences` must be a list of lists of token ids. "
            f"Received: stop_sequences={stop_sequences!r:.100}"
        )
    checked = []
    for sequence in stop_sequences:
        if not isinstance(sequence, (list, tuple)):
            raise TypeError(
                "`stop_sequences` must be a list of lists of token ids. "
                f"Received: stop_sequences={stop_sequences!r:.100}"
            )
        if not sequence:
            raise ValueError(
                "`stop_sequences` must hold non-empty lists of token ids. "
                f"Received: stop_sequences={stop_sequences!r:.100}"
            )
        for token in sequence:
            check_token_id(token, "stop_sequences", vocabulary_size)
            if pad_id is not None and int(token) == pad_id:
                raise ValueError(
                    "`stop_sequences` must not hold the padding id "
                    f"{pad_id}: padding is never generated. "
                    f"Received: stop_sequences={stop_sequences!r:.100}"
                )
        checked.append(tuple(int(token) for token in sequence))
    return tuple(checked)


def ends_with_stop_sequence(tokens, last_index, stop_sequences, prompt_lengths):
    """bool `(batch, beams)`: the tokens up to `last_index` end with a stop
    sequence whose every token was generated.

    Args:
        tokens: int32 `(batch, beams, total_length)`.
        last_index: int32 scalar, the position just written.
        stop_sequences: tuples of ids.
        prompt_lengths: int32 `(batch,)`: positions before it are given.
    """
    batch_size, beams = ops.shape(tokens)[0], ops.shape(tokens)[1]
    stopped = ops.zeros((batch_size, beams), "bool")
    for sequence in stop_sequences:
        width = len(sequence)
        first = last_index - width + 1
        # A window inside the buffer (a negative `first` can not match: the
        # prompt holds at least one token).
        window = ops.slice(
            tokens, (0, 0, ops.maximum(first, 0)), (batch_size, beams, width)
        )  # (batch, beams, width)
        target = ops.convert_to_tensor(sequence, "int32")
        matches = ops.all(ops.equal(window, target[None, None, :]), axis=-1)
        generated = ops.greater_equal(first, prompt_lengths)[:, None]  # (batch, 1)
        stopped = ops.logical_or(stopped, ops.logical_and(matches, generated))
    return stopped
