"""The error hierarchy. Every error tallow raises on bad input is a TallowError.

Subclasses also derive from the built-in exception a Python user would catch for
the same mistake (ValueError for a shape mismatch, IndexError for an index out of
range), so code written for NumPy or PyTorch keeps working.
"""


class TallowError(Exception):
    """Base class of every error raised by tallow."""


class ShapeMismatchError(TallowError, ValueError):
    """Shapes that an op needs to agree (or to broadcast) do not."""


class DTypeMismatchError(TallowError, TypeError):
    """Two operands have different dtypes (tallow never converts implicitly)."""


class DeviceMismatchError(TallowError, ValueError):
    """Two operands live on different devices."""


class UnsupportedDTypeError(TallowError, TypeError):
    """The op cannot run on this dtype, or the device cannot hold it."""


class DimOutOfRangeError(TallowError, IndexError):
    """A dimension index is outside ``-rank..rank-1``."""


class NarrowOutOfBoundsError(TallowError, IndexError):
    """A narrow, slice or in-place write reaches outside the tensor."""


class IndexOutOfRangeError(TallowError, IndexError):
    """An index value (in ``index_select``, ``gather``, ...) is outside the indexed dim."""


class DeviceLostError(TallowError, RuntimeError):
    """The GPU device is gone (a driver failure, a GPU reset, ``destroy()``): nothing more
    runs on it in this process."""


class NotDifferentiableError(TallowError):
    """Backward reached an op that has no gradient."""


class FileFormatError(TallowError, ValueError):
    """A file is truncated, corrupted or not in the expected format."""


class FileWriteError(TallowError, OSError):
    """A file could not be written (full disk, no permission); the old file is intact."""


class StaleGraphError(TallowError, RuntimeError):
    """Backward over a graph whose input was changed in place after being recorded."""


class NoGradientError(TallowError, KeyError):
    """A gradient store has no gradient for the tensor asked for."""

    def __str__(self):  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


class ValueNotRepresentableError(TallowError, OverflowError, ValueError):
    """A value cannot be held by the requested dtype (NaN or inf as an integer, 300 as u8)."""


class InvalidArgumentError(TallowError, ValueError, TypeError):
    """An argument has the wrong type or value (a byte count of "abc", -1 threads)."""


class ShapeTooLargeError(TallowError, ValueError):
    """A shape has more elements, or needs more bytes, than can ever be held."""


class InplaceOnTrackedError(TallowError, RuntimeError):
    """An in-place op (``add_``, ``x[i] = v``, ...) on a Var or on a tensor computed
    from one: it would change values the recorded graph needs for backward."""


class OverlappingWriteError(TallowError, RuntimeError):
    """An in-place write into a view where several elements share one memory location
    (a broadcast view): the result would depend on the write order."""


class NotContiguousError(TallowError, RuntimeError):
    """An op that never copies (``view``) was given a non-contiguous tensor."""


class DistributedError(TallowError, RuntimeError):
    """Distributed embedding cannot run: Ray is missing, the cluster cannot be
    reached, or the cluster lacks what the job asks for (workers, GPUs)."""


class EmbeddingIndexError(TallowError, ValueError):
    """An embedding index directory is missing, empty, or not one tallow wrote."""


class CaptureError(TallowError, RuntimeError):
    """A function given to ``tl.compile`` does something a recorded replay could not
    repeat faithfully (reads tensor values into Python, draws random numbers, keeps a
    tensor computed inside, returns a tensor whose graph a replay would not rebuild)."""
