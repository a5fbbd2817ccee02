"""Every error class, with messages naming the op and what was involved."""

import inspect
import os
import re

import pytest

import tallow as tl
import tallow.errors

API_MD = os.path.join(os.path.dirname(__file__), "..", "docs", "api.md")


def error_classes():
    """The classes tallow.errors defines (not the built-ins it derives from)."""
    return [cls for name, cls in vars(tallow.errors).items()
            if inspect.isclass(cls) and cls.__module__ == tallow.errors.__name__]


def test_every_error_class_is_exported_and_documented():
    classes = error_classes()
    assert len(classes) >= 20 and tl.TallowError in classes  # the module was read
    with open(API_MD, encoding="utf-8") as f:
        api = f.read()
    errors_section = api.split("## Errors", 1)[1].split("\n## ", 1)[0]
    for cls in classes:
        assert issubclass(cls, tl.TallowError), cls
        assert getattr(tl, cls.__name__, None) is cls, f"tallow.{cls.__name__} is missing"
        assert cls.__name__ in tl.__all__, f"{cls.__name__} is not in tallow.__all__"
        assert re.search(rf"`{cls.__name__}`", errors_section), \
            f"{cls.__name__} is not in the Errors section of docs/api.md"
        assert cls.__doc__, f"{cls.__name__} has no docstring"


def test_hierarchy():
    assert issubclass(tl.ShapeMismatchError, tl.TallowError) and issubclass(tl.ShapeMismatchError, ValueError)
    assert issubclass(tl.DimOutOfRangeError, IndexError) and issubclass(tl.DimOutOfRangeError, tl.TallowError)
    for cls in (tl.DTypeMismatchError, tl.DeviceMismatchError, tl.UnsupportedDTypeError,
                tl.NarrowOutOfBoundsError, tl.IndexOutOfRangeError, tl.NotDifferentiableError,
                tl.FileFormatError):
        assert issubclass(cls, tl.TallowError)


def test_shape_mismatch_names_op_and_shapes():
    with pytest.raises(tl.ShapeMismatchError) as e:
        tl.zeros((2, 3)).add(tl.zeros((3, 2)))
    assert "add" in str(e.value) and "(2, 3)" in str(e.value) and "(3, 2)" in str(e.value)
    with pytest.raises(tl.ShapeMismatchError, match="broadcast"):
        tl.zeros((2, 3)) + tl.zeros((4,))


def test_dtype_mismatch_names_dtypes():
    # candle's names refuse two dtypes; the operators and tl.cat promote (semantics.md).
    with pytest.raises(tl.DTypeMismatchError) as e:
        tl.zeros(2).broadcast_mul(tl.zeros(2, dtype=tl.f64))
    assert "f32" in str(e.value) and "f64" in str(e.value) and "mul" in str(e.value)
    with pytest.raises(tl.DTypeMismatchError):
        (tl.zeros(2) > 0).where_cond(tl.zeros(2), tl.zeros(2, dtype=tl.f16))
    assert (tl.zeros(2) * tl.zeros(2, dtype=tl.f64)).dtype == tl.f64
    assert tl.cat([tl.zeros(2), tl.zeros(2, dtype=tl.f16)], 0).dtype == tl.f32


def test_unsupported_dtype():
    with pytest.raises(tl.UnsupportedDTypeError, match="u32"):
        tl.zeros(2, dtype=tl.u32).exp()
    with pytest.raises(tl.UnsupportedDTypeError):
        tl.zeros(2).index_select(tl.zeros(1), 0)


def test_dim_out_of_range():
    with pytest.raises(tl.DimOutOfRangeError, match="narrow"):
        tl.zeros((2, 3)).narrow(2, 0, 1)
    with pytest.raises(tl.DimOutOfRangeError):
        tl.zeros((2, 3)).transpose(0, -3)
    with pytest.raises(IndexError):
        tl.zeros((2, 3)).squeeze(5)


def test_narrow_out_of_bounds():
    with pytest.raises(tl.NarrowOutOfBoundsError, match="exceeds"):
        tl.zeros((2, 3)).narrow(1, 2, 2)
    with pytest.raises(tl.NarrowOutOfBoundsError):
        tl.zeros((2, 3)).narrow(1, -1, 1)


def test_device_mismatch(gpu):
    with pytest.raises(tl.DeviceMismatchError) as e:
        tl.zeros(2) + tl.zeros(2, device=gpu)
    assert "cpu" in str(e.value) and "gpu" in str(e.value)


def test_permute_and_broadcast_errors():
    with pytest.raises(tl.ShapeMismatchError, match="permutation"):
        tl.zeros((2, 3)).permute((0, 0))
    with pytest.raises(tl.ShapeMismatchError):
        tl.zeros((2, 3)).broadcast_as((3, 3))
    with pytest.raises(tl.ShapeMismatchError):
        tl.zeros((2, 3)).t().t().broadcast_as((3,))


def test_not_differentiable():
    x = tl.Var([1.5, 2.5])
    with pytest.raises(tl.NotDifferentiableError, match="floor"):
        x.floor().sum_all().backward()
    with pytest.raises(tl.NotDifferentiableError):
        tl.zeros(2).sum_all().backward()
