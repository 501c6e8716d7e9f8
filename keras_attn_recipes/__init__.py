"""The recipes' shared code and the `keras-attn-translate` command line.

`keras_attn_recipes.translate_multi30k` trains, evaluates and runs the
English-to-German Multi30k translator (installed as the console script
`keras-attn-translate`; `python recipes/translate_multi30k.py` in a
checkout). Nothing here imports Keras at import time, so a command line can
choose its backend (`--backend`) before Keras loads; that is why this is a
package beside `keras_attn` rather than inside it (importing `keras_attn`
imports Keras).
"""
