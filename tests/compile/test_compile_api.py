"""``tl.compile``'s contract: what keys a recording, when it records again, what a
replay returns, and the ``CaptureError`` for everything a replay could not repeat
(raised naming the op, never a silent wrong replay)."""

from __future__ import annotations

import numpy as np
import pytest

import tallow as tl
from tallow.errors import CaptureError


def _t(a, dtype=np.float32):
    return tl.Tensor(np.asarray(a, dtype=dtype))


def test_compile_is_the_function_and_a_decorator_with_options():
    assert callable(tl.compile) and "compile" in tl.__all__

    @tl.compile(max_entries=2)
    def f(x):
        return x * 2.0

    np.testing.assert_array_equal(f(_t([1, 2])).numpy(), [2, 4])
    assert f.__name__ == "f"
    with pytest.raises(TypeError):
        tl.compile(3)


def test_a_new_shape_dtype_or_argument_records_again_and_the_cache_is_bounded():
    calls = []

    def fn(x, scale):
        calls.append(1)  # Python runs only while recording
        return x * scale

    f = tl.compile(fn, max_entries=2)
    a = _t([1, 2, 3])
    f(a, 2.0)
    f(a, 2.0)
    assert len(calls) == 1
    f(_t([1, 2, 3, 4]), 2.0)                          # new shape
    np.testing.assert_array_equal(f(_t([1, 2], np.float64), 2.0).numpy(), [2, 4])  # new dtype
    assert len(calls) == 3
    np.testing.assert_array_equal(f(a, 3.0).numpy(), [3, 6, 9])  # new non-tensor argument
    assert len(calls) == 4 and f.stats()["entries"] == 2
    f(a, 2.0)  # evicted long ago: records again
    assert len(calls) == 5
    f.reset()
    f(a, 3.0)
    assert len(calls) == 6


def test_a_strided_view_keys_differently_from_a_contiguous_tensor():
    f = tl.compile(lambda x: x + 1.0)
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(f(_t(base)).numpy(), base + 1)
    view = _t(base.T.copy()).t()
    np.testing.assert_array_equal(f(view).numpy(), base + 1)
    assert f.stats()["recordings"] == 2


def test_outputs_in_structures_and_constants_come_back():
    @tl.compile
    def f(pair, scale=1.0):
        x, y = pair
        return {"sum": x + y, "prod": [x * y, "tag"], "n": 3}

    for _ in range(2):
        out = f((_t([1, 2]), _t([3, 4])))
        np.testing.assert_array_equal(out["sum"].numpy(), [4, 6])
        np.testing.assert_array_equal(out["prod"][0].numpy(), [3, 8])
        assert out["prod"][1] == "tag" and out["n"] == 3


def test_the_same_tensor_twice_and_an_input_returned():
    f = tl.compile(lambda x, y: (x + y, x))
    a = _t([1, 2])
    s, x = f(a, a)
    s, x = f(a, a)
    np.testing.assert_array_equal(s.numpy(), [2, 4])
    assert x._storage is a._storage


def test_reading_values_inside_is_refused_naming_the_op():
    @tl.compile
    def f(x):
        if (x.sum_all() > 0).item():
            return x
        return -x

    with pytest.raises(CaptureError, match="to_numpy"):
        f(_t([1, 2]))

    with pytest.raises(CaptureError, match="reads a tensor's values"):
        tl.compile(lambda x: x.numpy())(_t([1.0]))
    with pytest.raises(CaptureError):
        tl.compile(lambda x: print(x))(_t([1.0]))


def test_random_ops_without_a_generator_argument_are_refused():
    with pytest.raises(CaptureError, match="rand_uniform"):
        tl.compile(lambda x: x + tl.rand(x.shape))(_t([1, 2]))
    with pytest.raises(CaptureError, match="rand_normal"):
        tl.compile(lambda x: x + tl.randn(x.shape))(_t([1, 2]))


def test_state_kept_outside_is_refused():
    w = tl.Var(np.ones(3, np.float32))
    opt = tl.nn.optim.Adam([w], lr=0.1)  # moments rebound to new tensors each step

    @tl.compile
    def step(x):
        opt.backward_step((w * x).sum_all())

    # The first call runs for real (state may be made once, on a first step); the
    # second finds the state rebound again and refuses to record it.
    step(_t([1, 2, 3]))
    assert not np.array_equal(w.numpy(), np.ones(3, np.float32))
    with pytest.raises(CaptureError, match="kept outside"):
        step(_t([1, 2, 3]))
    assert step.stats()["recordings"] == 0

    cache = {}

    @tl.compile
    def memo(x):
        cache["last"] = x * 2.0
        return x

    memo(_t([1.0]))
    with pytest.raises(CaptureError, match="kept outside"):
        memo(_t([1.0]))


def test_state_made_on_the_first_call_is_recorded_from_the_second():
    cache = {}

    @tl.compile
    def scaled(x):
        if "k" not in cache:
            cache["k"] = tl.Tensor(np.array([3.0], np.float32)) * 1.0  # made once, kept
        return x * cache["k"]

    assert scaled(_t([1.0, 2.0])).tolist() == [3.0, 6.0]
    assert scaled.stats()["recordings"] == 0
    assert scaled(_t([2.0, 2.0])).tolist() == [6.0, 6.0]
    assert scaled(_t([1.0, 1.0])).tolist() == [3.0, 3.0]
    assert scaled.stats()["recordings"] == 1 and scaled.stats()["replays"] == 1


def test_a_graph_returned_without_backward_inside_is_refused():
    w = tl.Var(np.ones(2, np.float32))
    f = tl.compile(lambda x: (w * x).sum_all())
    with pytest.raises(CaptureError, match="backward"):
        f(_t([1, 2]))
    g = tl.compile(lambda x: (w * x).sum_all().detach())
    assert g(_t([1, 2])).to_scalar() == 3.0


def test_gradients_computed_inside_can_be_returned():
    w = tl.Var(np.array([1.0, -2.0, 3.0], np.float32))

    @tl.compile
    def grad(x):
        loss = (w * x).sqr().sum_all()
        return loss.backward().get(w)

    for x in ([1.0, 2.0, 3.0], [0.5, 0.0, -1.0]):
        g = grad(_t(x))
        want = 2 * np.array(x, np.float32) ** 2 * w.numpy()
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)


def test_unhashable_arguments_are_refused():
    with pytest.raises(CaptureError, match="unhashable"):
        tl.compile(lambda x, opts: x)(_t([1.0]), {"a": np.zeros(2)})


def test_a_captured_tensor_that_is_gone_is_an_error_not_a_stale_replay():
    holder = [tl.Var(np.ones(2, np.float32))]
    f = tl.compile(lambda x: (x * holder[0]).detach())
    np.testing.assert_array_equal(f(_t([2, 3])).numpy(), [2, 3])
    holder[0] = tl.Var(np.full(2, 5, np.float32))  # the old Var is dropped
    with pytest.raises(CaptureError, match="no longer exists"):
        f(_t([2, 3]))
    f.reset()
    np.testing.assert_array_equal(f(_t([2, 3])).numpy(), [10, 15])


def test_values_of_captured_vars_are_read_at_each_replay():
    w = tl.Var(np.ones(2, np.float32))
    f = tl.compile(lambda x: (x * w).detach())
    f(_t([2, 3]))
    w.set(_t([4, 5]))
    np.testing.assert_array_equal(f(_t([2, 3])).numpy(), [8, 15])


def test_nested_compiled_functions_are_recorded_inline():
    inner = tl.compile(lambda x: x * 3.0)
    outer = tl.compile(lambda x: inner(x) + 1.0)
    for _ in range(2):
        np.testing.assert_array_equal(outer(_t([1, 2])).numpy(), [4, 7])
    assert inner.stats()["recordings"] == 0


def test_unused_work_is_not_replayed():
    @tl.compile
    def f(x):
        _unused = x.exp().sum_all()
        return x.sqr().sum_all()

    f(_t([1, 2]))
    assert f(_t([1, 2])).to_scalar() == 5.0
    assert f.stats()["calls"] == 2  # sqr and sum; exp and its sum are dropped


def test_constants_made_inside_are_made_again_each_replay():
    @tl.compile
    def f(x):
        z = tl.zeros((3,))
        z.slice_set(x, 0, 1)  # an in-place write into a tensor made inside
        return z + tl.Tensor(np.array([1.0, 1.0, 1.0], np.float32))

    for x in ([1, 2], [5, 6], [7, 8]):
        out = f(_t(x))
        np.testing.assert_array_equal(out.numpy(), [1, x[0] + 1, x[1] + 1])


def test_an_error_inside_caches_nothing_and_the_next_call_records():
    state = {"fail": True}

    @tl.compile
    def f(x):
        if state["fail"]:
            raise ValueError("boom")
        return x + 1.0

    with pytest.raises(ValueError, match="boom"):
        f(_t([1.0]))
    state["fail"] = False
    assert f(_t([1.0])).item() == 2.0 and f.stats()["recordings"] == 1
    # The backend classes are as they were: eager ops run unrecorded.
    from tallow.backends.cpu.storage import CpuStorage
    assert "binary" not in CpuStorage.__dict__


@pytest.mark.gpu
def test_a_device_move_inside_is_refused(gpu):
    with pytest.raises(CaptureError, match="another device"):
        tl.compile(lambda x: x.to_device(gpu) * 2.0)(_t([1.0]))
