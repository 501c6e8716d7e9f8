"""Train, evaluate and use an English-to-German Transformer on Multi30k.

A thin wrapper over `keras_attn_recipes.translate_multi30k` (installed as
the console script `keras-attn-translate`), so that a checkout runs the
same command line: `python recipes/translate_multi30k.py --help`. The
recipes import `keras_attn` and `keras_attn_recipes` as installed packages
(`bash scripts/setup.sh` installs the checkout in editable mode), not
through `sys.path`.
"""

import sys
import time

from keras_attn_recipes.translate_multi30k import (
    TranslationConfig,
    main,
    parse_args,
)

if __name__ == "__main__":
    start = time.time()
    main()
    print(f"Done in {time.time() - start:.0f} s.", file=sys.stderr)


__all__ = ["TranslationConfig", "main", "parse_args"]
