"""What several test folders share: differential-test helpers (``differential``), the
GPU-vs-CPU runners (``gpu``), small random models (``models``) and their pytest
fixtures (``model_fixtures``), candle's and ggml's scalar block routines as oracles
(``candle_ref``, ``ggml_ref``, ``quantized_reference``), ggml's own bytes
(``ggml_golden``) and sample weights for the quantized tests (``quantized_samples``).

``pyproject.toml`` puts ``tests/`` on the path, so tests import ``support.*``."""
