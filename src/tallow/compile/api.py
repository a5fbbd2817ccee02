"""``tl.compile``: record a function once per argument signature, replay it after.

The first call with a given signature (see ``signature.py``) runs the function
for real while ``recorder`` notes its backend calls; ``plan`` turns that trace
into a replay function, kept in a small least-recently-used cache. Later calls
with the same signature run the replay on the new arguments' storages and wrap
the results in tensors of the recorded layouts.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

from ..errors import CaptureError
from ..tensor_class import Tensor
from . import recorder
from .plan import Plan
from .signature import flatten, signature, unflatten


class _Entry:
    __slots__ = ("plan", "out_tree", "out_layouts", "replays")

    def __init__(self, plan, out_tree, out_layouts):
        self.plan = plan
        self.out_tree = out_tree
        self.out_layouts = out_layouts
        self.replays = 0


class CompiledFunction:
    """A function recorded on its first call per argument signature and replayed after
    (what ``tl.compile(fn)`` returns). Call it as the function; ``reset()`` forgets
    the recordings; ``stats()`` says what was recorded and fused."""

    def __init__(self, fn, max_entries: int = 8, fuse: bool = True):
        if not callable(fn):
            raise TypeError(f"compile: expected a function, got {type(fn).__name__}")
        if max_entries < 1:
            raise ValueError(f"compile: max_entries must be at least 1, got {max_entries}")
        self.fn = fn
        self.max_entries = int(max_entries)
        self.fuse = bool(fuse)
        self._cache: OrderedDict = OrderedDict()
        self._first_escaped: set = set()  # signatures whose first recording kept state
        self.recordings = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if recorder.is_recording():
            # Inside another compiled function's recording: its recorder sees our ops.
            return self.fn(*args, **kwargs)
        key, leaves = signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            return self._record(key, leaves, args, kwargs)
        self._cache.move_to_end(key)
        entry.replays += 1
        storages = entry.plan.run([t._storage for t in leaves])
        wrap = Tensor._wrap
        outs = [wrap(s, lay) for s, lay in zip(storages, entry.out_layouts)]
        return unflatten(entry.out_tree, outs)

    def _record(self, key, leaves, args, kwargs):
        result, rec = recorder.record(self.fn, args, kwargs, [t._storage for t in leaves])
        out_leaves: list = []
        tree = flatten(result, out_leaves, "the return value")
        detached = []
        for i, t in enumerate(out_leaves):
            if t._track and not t.is_variable():
                if not rec.trace.backward_ran:
                    raise CaptureError(
                        f"compile: return value {i} depends on a Var through ops recorded for "
                        "autograd, and a replay records no graph to run backward() on later. "
                        "Capture the whole step (call backward() and the optimiser inside the "
                        "compiled function) or return .detach()")
                t = t.detach()  # the step ran backward inside: return the value
            detached.append(t)
        trace = rec.trace
        trace.outputs = [(rec.ref(t._storage, "the return value").slot, t._layout) for t in detached]
        del out_leaves, result
        try:
            recorder.check_nothing_escaped(rec, [t._storage for t in detached])
        except CaptureError:
            if key in self._first_escaped:
                raise
            # State made on a first call (an optimiser's momentum buffers, a cache
            # filled once) and updated in place on later calls: this call ran for real
            # and its results stand; the next call with this signature records again.
            self._first_escaped.add(key)
            return unflatten(tree, detached)
        plan = Plan(trace, fuse=self.fuse)
        self._cache[key] = _Entry(plan, tree, [lay for _s, lay in trace.outputs])
        if len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        self.recordings += 1
        return unflatten(tree, detached)

    def reset(self) -> None:
        """Forget every recording: the next call records again (after a model's Vars were
        replaced, or Python state the function reads changed)."""
        self._cache.clear()
        self._first_escaped.clear()

    def stats(self) -> dict:
        """``{"recordings", "entries", "replays", "calls", "fused_groups", "fused_ops",
        "lowered"}`` (calls, groups, ops and calls run by specialised kernels of the
        most recently used recording)."""
        out = {"recordings": self.recordings, "entries": len(self._cache),
               "replays": sum(e.replays for e in self._cache.values())}
        if self._cache:
            plan = next(reversed(self._cache.values())).plan
            out.update(calls=plan.n_calls, fused_groups=plan.n_groups, fused_ops=plan.n_fused_ops,
                       lowered=plan.n_lowered)
        return out

    def __repr__(self):
        return f"<tallow compiled {getattr(self.fn, '__qualname__', self.fn)!r}>"


def compile(fn=None, *, max_entries: int = 8, fuse: bool = True):  # noqa: A001  (tl.compile)
    """Record ``fn`` on its first call per argument signature and replay it after.

    Usable as ``tl.compile(fn)``, ``@tl.compile`` or ``@tl.compile(max_entries=4)``.
    The signature is the tensor arguments' shapes, strides, dtypes, devices and
    Var-ness plus every non-tensor argument; ``max_entries`` recordings are kept
    (least recently used first out). ``fuse=False`` replays without fusing
    element-wise chains. See docs/compile.md for what can be captured.
    """
    if fn is None:
        return lambda f: CompiledFunction(f, max_entries=max_entries, fuse=fuse)
    return CompiledFunction(fn, max_entries=max_entries, fuse=fuse)
