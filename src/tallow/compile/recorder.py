"""Recording one call of a function as the backend calls it makes.

Every tensor op validates its arguments at the Tensor layer, then calls one method
of a backend storage (``binary``, ``matmul``, ``copy_into_inplace``...) or of a
device (``zeros``, ``from_numpy``...). A recording puts a thin wrapper on those
methods of the backend classes for the length of one call and takes it off again,
so the op path costs nothing when no recording runs (there is no hook to test).
Each call the wrappers see becomes a ``Call``: the original function, the storage
it ran on and its arguments, storages replaced by ``Ref(slot)``. A slot is a
storage the trace knows: an *input* (the storage of a tensor argument), an
*external* (a storage that existed before the call, such as a model's Var,
held by weak reference), or *produced* (the result of a recorded call).

What a replay could not repeat is refused on the spot with ``CaptureError``
naming the op: reading values into Python (``.item()``, ``.numpy()``, printing,
``if t > 0``), random numbers drawn from the global generator, a storage made by
a path the recorder does not see.
"""

from __future__ import annotations

import gc
import inspect
import sys
import threading
import weakref

from ..backends.base import BackendDevice, BackendStorage
from ..backends.shared_buffer import CAPTURE
from ..errors import CaptureError
from ..grad_mode import GRAD_MODE

# Storage methods that hand values to Python: a replay cannot repeat the Python
# code that looked at them.
READS = frozenset(("to_numpy", "to_numpy_writable", "__array__", "view"))
# Device methods drawing from the global random generator (its state is not an
# input of the trace, so a replay would repeat the first draw).
RANDOM = frozenset(("rand_uniform", "rand_normal", "set_seed"))
CREATION = frozenset(("zeros", "full", "arange", "from_numpy", "adopt_numpy"))
# Methods of the storage protocol that are not ops (metadata).
_NOT_OPS = frozenset(("device", "nbytes", "buffer_size", "ptr"))

_ACTIVE = None  # the Recording of the thread that records, or None


class Ref:
    """A storage operand of a recorded call: slot ``slot`` of the trace."""

    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot

    def __repr__(self):
        return f"s{self.slot}"


class Slot:
    """A storage the trace knows: ``kind`` is "input", "external" or "produced"."""

    __slots__ = ("kind", "slot_no", "index", "ref", "dtype", "count", "call", "cls_name")

    def __init__(self, kind, slot_no, storage, index=None, call=None):
        self.kind = kind
        self.slot_no = slot_no
        self.cls_name = type(storage).__name__
        self.index = index  # the input leaf number, for inputs
        self.ref = weakref.ref(storage)
        self.dtype = storage.dtype
        self.count = storage.count
        self.call = call  # the producing call's number, for produced slots


class Call:
    """One backend call: ``func(recv, *args, **kwargs)``; ``owner`` is "storage" or
    "device"; ``out`` the produced slot (an int), a tuple of them, or None."""

    __slots__ = ("owner", "name", "func", "recv", "args", "kwargs", "out")

    def __init__(self, owner, name, func, recv, args, kwargs, out):
        self.owner = owner
        self.name = name
        self.func = func
        self.recv = recv
        self.args = args
        self.kwargs = kwargs
        self.out = out

    def refs(self):
        """The slots this call reads or writes (receiver first)."""
        found = [self.recv.slot] if isinstance(self.recv, Ref) else []
        _collect(self.args, found)
        _collect(tuple(self.kwargs.values()), found)
        return found

    def describe(self) -> str:
        op = self.args[0] if self.args and isinstance(self.args[0], str) else None
        return f"{self.name}({op})" if op else self.name


def _collect(args, found):
    for a in args:
        if isinstance(a, Ref):
            found.append(a.slot)
        elif isinstance(a, (tuple, list)):
            _collect(a, found)


class Trace:
    """A recorded call: slots, calls, which slots are the inputs and outputs."""

    def __init__(self):
        self.slots: list = []
        self.calls: list = []
        self.outputs: list = []   # (slot, layout) per output tensor
        self.written: set = set()  # slots of inputs/externals written in place
        self.backward_ran = False


class Recording:
    """The state of one recording: the trace being built and the storages seen."""

    def __init__(self, input_storages):
        self.thread = threading.get_ident()
        self.depth = 0  # > 0 inside a recorded call (its inner calls are its own)
        self.trace = Trace()
        self.slot_of: dict = {}  # id(storage) -> slot, for storages alive and seen
        self.born: set = set()   # ids of storages made during the recording
        for i, s in enumerate(input_storages):
            if id(s) not in self.slot_of:
                self._new_slot("input", s, index=i)

    # -- slots ------------------------------------------------------------------
    def _new_slot(self, kind, storage, index=None, call=None):
        slots = self.trace.slots
        n = len(slots)
        slot = Slot(kind, n, storage, index=index, call=call)
        slots.append(slot)
        key = id(storage)
        self.slot_of[key] = n
        table = self.slot_of
        # Forget the id when the storage dies: a new storage may reuse the number.
        slot.ref = weakref.ref(storage, lambda _r, k=key, n=n: table.pop(k, None) if table.get(k) == n else None)
        return n

    def ref(self, storage, what) -> Ref:
        n = self.slot_of.get(id(storage))
        if n is None:
            if id(storage) in self.born:
                raise CaptureError(
                    f"compile: {what} uses a storage made by a path the recorder does not "
                    "see (an op outside the backend protocol); this function cannot be captured")
            n = self._new_slot("external", storage)
        return Ref(n)

    def refs(self, args, what):
        out = []
        for a in args:
            if isinstance(a, BackendStorage):
                out.append(self.ref(a, what))
            elif isinstance(a, (tuple, list)) and any(isinstance(x, (BackendStorage, tuple, list)) for x in a):
                out.append(type(a)(self.refs(a, what)))
            else:
                out.append(a)
        return tuple(out)

    def _result(self, out, what, call_no):
        if out is None:
            return None
        if isinstance(out, BackendStorage):
            if id(out) in self.slot_of:
                return None  # the op returned a storage the trace already has (itself)
            return self._new_slot("produced", out, call=call_no)
        if isinstance(out, (tuple, list)) and all(o is None or isinstance(o, BackendStorage)
                                                  for o in out):
            # (None: a result the op was asked not to make.)
            return tuple(self._result(o, what, call_no) for o in out)
        raise CaptureError(
            f"compile: the op '{what}' returns a Python value ({type(out).__name__}), which a "
            "replay cannot repeat; compute it outside the compiled function")

    # -- calls --------------------------------------------------------------------
    def storage_call(self, name, func, storage, args, kwargs):
        if name in READS:
            raise CaptureError(
                f"compile: '{name}' reads a tensor's values into Python inside the compiled "
                "function (.item(), .numpy(), .values(), print, float(t), bool(t), an `if` on "
                "a tensor, or a move to another device); a replay would not run that Python "
                "again. Return the tensor instead and read it (or move it) after the call")
        recv = self.ref(storage, name)
        rargs = self.refs(args, name)
        rkw = {k: (self.ref(v, name) if isinstance(v, BackendStorage) else v) for k, v in kwargs.items()}
        self.depth += 1
        try:
            out = func(storage, *args, **kwargs)
        finally:
            self.depth -= 1
        call = Call("storage", name, func, recv, rargs, rkw, None)
        call.out = self._result(out, call.describe(), len(self.trace.calls))
        self.trace.calls.append(call)
        if name.endswith("_inplace"):
            slot = self.trace.slots[recv.slot]
            if slot.kind != "produced":
                self.trace.written.add(recv.slot)
        return out

    def device_call(self, name, func, device, args, kwargs):
        if name in RANDOM:
            raise CaptureError(
                f"compile: the random op '{name}' draws from the global generator, whose state "
                "is not an input of the compiled function (a replay would repeat the first "
                "draw); make the random tensor outside and pass it as an argument")
        self.depth += 1
        try:
            out = func(device, *args, **kwargs)
        finally:
            self.depth -= 1
        call = Call("device", name, func, device, tuple(args), dict(kwargs), None)
        call.out = self._result(out, name, len(self.trace.calls))
        self.trace.calls.append(call)
        return out

    def note_born(self, storage):
        self.born.add(id(storage))


# -- installing the wrappers --------------------------------------------------------

def _storage_wrapper(name, func):
    def recorded(self, *args, **kwargs):
        rec = _ACTIVE
        if rec is None or rec.depth or rec.thread != threading.get_ident():
            return func(self, *args, **kwargs)
        return rec.storage_call(name, func, self, args, kwargs)

    recorded.__name__ = name
    recorded.__wrapped__ = func
    return recorded


def _device_wrapper(name, func):
    def recorded(self, *args, **kwargs):
        rec = _ACTIVE
        if rec is None or rec.depth or rec.thread != threading.get_ident():
            return func(self, *args, **kwargs)
        return rec.device_call(name, func, self, args, kwargs)

    recorded.__name__ = name
    recorded.__wrapped__ = func
    return recorded


def _born_wrapper(func, static):
    def made(*args, **kwargs):
        out = func(*args, **kwargs)
        rec = _ACTIVE
        if rec is not None and rec.thread == threading.get_ident():
            rec.note_born(out)
        return out

    return staticmethod(made) if static else made


def _storage_op_names():
    names = {n for n in dir(BackendStorage) if not n.startswith("_")} - _NOT_OPS
    return sorted(names | {"to_numpy_writable", "__array__", "view"})


_STORAGE_OPS = _storage_op_names()


def _backend_classes():
    """(storage classes, device classes) of the backends loaded now."""
    from ..backends.cpu.device import CpuDeviceState
    from ..backends.cpu.storage import CpuStorage

    storages, devices = [CpuStorage], [CpuDeviceState]
    gpu = sys.modules.get("tallow.backends.gpu.storage")
    gdev = sys.modules.get("tallow.backends.gpu.device")
    if gpu is not None and gdev is not None:
        storages.append(gpu.GpuStorage)
        devices.append(gdev.GpuDeviceState)
    return storages, devices


def original(cls, name):
    """The unwrapped function ``cls.name`` (whether or not a recording runs)."""
    f = getattr(cls, name)
    return getattr(f, "__wrapped__", f)


class _Patches:
    """The wrappers put on the backend classes for one recording, and their removal."""

    def __init__(self):
        self.saved = []  # (cls, name, had_own, value)

    def _set(self, cls, name, value):
        own = cls.__dict__.get(name, _MISSING)
        self.saved.append((cls, name, own))
        setattr(cls, name, value)

    def install(self, backprop_module, on_backward):
        storages, devices = _backend_classes()
        for cls in storages:
            for name in _STORAGE_OPS:
                f = inspect.getattr_static(cls, name, None)
                if inspect.isfunction(f):
                    self._set(cls, name, _storage_wrapper(name, f))
            for name in ("_wrap", "from_flat", "adopt"):
                f = inspect.getattr_static(cls, name, None)
                if isinstance(f, staticmethod):
                    self._set(cls, name, _born_wrapper(f.__func__, True))
                elif inspect.isfunction(f):
                    self._set(cls, name, _born_wrapper(f, False))
        for cls in devices:
            for name in CREATION | RANDOM:
                f = inspect.getattr_static(cls, name, None)
                if inspect.isfunction(f):
                    self._set(cls, name, _device_wrapper(name, f))
        real = backprop_module.backward

        def backward(root):
            on_backward()
            return real(root)

        self.saved.append((backprop_module, "backward", real))
        backprop_module.backward = backward
        return storages

    def remove(self):
        for cls, name, own in reversed(self.saved):
            if isinstance(cls, type) and own is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
        self.saved.clear()


_MISSING = object()
_LOCK = threading.Lock()


def is_recording() -> bool:
    """True while this thread records a compiled function."""
    rec = _ACTIVE
    return rec is not None and rec.thread == threading.get_ident()


def record(fn, args, kwargs, input_storages):
    """Run ``fn(*args, **kwargs)`` once for real while recording its backend calls.

    Returns ``(result, recording)``. Raises ``CaptureError`` for what cannot be
    replayed; the wrappers are removed whatever happens.
    """
    global _ACTIVE
    from .. import backprop

    rec = Recording(input_storages)
    patches = _Patches()
    with _LOCK:  # one recording at a time: the wrappers are process-wide
        loaded_gpu = "tallow.backends.gpu.storage" in sys.modules
        patches.install(backprop, lambda: setattr(rec.trace, "backward_ran", True))
        _ACTIVE = rec
        # backward() leaves .grad alone here: a replay could not update it (the step
        # uses the GradStore backward returns, as opt.backward_step does).
        fill_grad, GRAD_MODE.fill_grad = GRAD_MODE.fill_grad, False
        CAPTURE.active = True  # clones copy where the trace sees it (shared_buffer.py)
        try:
            result = fn(*args, **kwargs)
        finally:
            _ACTIVE = None
            GRAD_MODE.fill_grad = fill_grad
            CAPTURE.active = False
            patches.remove()
    if not loaded_gpu and "tallow.backends.gpu.storage" in sys.modules:
        raise CaptureError(
            "compile: the GPU backend was first used inside the compiled function, so its "
            "ops were not recorded; make any GPU tensor once before the first call")
    return result, rec


def check_nothing_escaped(rec, output_storages):
    """Raise ``CaptureError`` when a storage computed inside the call is still alive
    outside it other than as an output (optimiser state rebound to a new tensor, a
    cache on a module...): a replay would leave that Python state at its first value."""
    keep = {id(s) for s in output_storages}

    def alive():
        return [i for i, s in enumerate(rec.trace.slots)
                if s.kind == "produced" and (o := s.ref()) is not None and id(o) not in keep]

    if alive():
        gc.collect()
        left = alive()
        if left:
            slot = rec.trace.slots[left[0]]
            call = rec.trace.calls[slot.call]
            raise CaptureError(
                f"compile: the result of '{call.describe()}' (call {slot.call}, {slot.count} "
                f"{slot.dtype} elements) is kept outside the compiled function other than as a "
                "return value (optimiser state such as momentum or Adam moments, a cache on a "
                "module, a global); a replay would not update it. Return it, or keep state in "
                "Vars updated with Var.set")
