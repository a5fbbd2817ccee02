"""IEEE special values pass silently, as in PyTorch: ``inf - inf`` is NaN and
``3e38 * 3e38`` is inf, with no RuntimeWarning from the NumPy kernels tallow's CPU
backend runs them on.

A filter on NumPy's floating-point messages ("invalid value / overflow / divide by
zero / underflow encountered in ...") raised from tallow's own modules, the code
that calls the ufunc: the caller's own NumPy calls keep their warnings, and NumPy's
``errstate`` / ``seterr`` settings are left alone (a per-op ``errstate`` would cost
more than an element-wise op's whole dispatch)."""

from __future__ import annotations

import warnings

MESSAGE = r"(invalid value|overflow|divide by zero|underflow) encountered in"
MODULES = r"tallow(\.|$)"


def install() -> None:
    """Add the filter (once: ``warnings.filterwarnings`` drops an identical one first)."""
    warnings.filterwarnings("ignore", message=MESSAGE, category=RuntimeWarning, module=MODULES)
