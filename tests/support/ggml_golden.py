"""ggml's own quantized bytes for fixed float rows (``tests/quantized/fixtures/ggml_golden.npz``).

The file holds ``x`` (float32 rows of 512) and, per type, the bytes ggml's
reference quantizers make of them; ``fixtures/make_ggml_golden.py`` says how
it was made and remakes it.
"""

import functools
import pathlib

import numpy as np

PATH = pathlib.Path(__file__).parents[1] / "quantized" / "fixtures" / "ggml_golden.npz"


@functools.lru_cache(maxsize=1)
def golden() -> dict:
    with np.load(PATH) as z:
        return {k: z[k] for k in z.files}
