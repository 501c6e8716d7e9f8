"""Streamed text: the new text of each row, from the tokens decoded so far.

A subword detokenizer (SentencePiece) joins pieces into words, so the text
of a token prefix is not always a prefix of the final text (a trailing
space that the next piece's word boundary would place differently, half
of a character made of byte pieces). `TextStream` therefore detokenizes
the whole prefix at every chunk and yields only what extends the text
already yielded, holding back trailing whitespace and replacement
characters until the row is finished; the concatenation of what it yields
is the detokenized final tokens.
"""

import re

# Trailing whitespace and U+FFFD (half of a character made of byte pieces):
# held back until more pieces or the end of the row settle them.
_UNSETTLED = re.compile(r"[\s\ufffd]+$")


class TextStream:
    """The text yielded so far per row; `update` returns the new text.

    Args:
        count: the number of rows (prompts or sentences).
    """

    def __init__(self, count):
        self.emitted = [""] * count

    def update(self, rows, texts, final=False):
        """The new text of every row: a list of `count` strings.

        Args:
            rows: the row numbers that `texts` belong to (others get `""`).
            texts: the detokenized text of each of those rows so far.
            final: whether `texts` are the rows' final texts (then nothing
                is held back).

        Raises:
            RuntimeError: if a final text does not extend the text already
                yielded (the concatenation would differ from it).
        """
        new = [""] * len(self.emitted)
        for row, text in zip(rows, texts):
            emitted = self.emitted[row]
            settled = text if final else _UNSETTLED.sub("", text)
            if settled.startswith(emitted):
                new[row], self.emitted[row] = settled[len(emitted) :], settled
            elif final:
                raise RuntimeError(
                    "The streamed text of a row is not a prefix of its final "
                    f"text. Received: streamed={emitted!r}, final={text!r}"
                )
        return new
