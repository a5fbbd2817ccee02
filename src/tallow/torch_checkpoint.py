"""Reading PyTorch checkpoints (``torch.save`` files) without PyTorch and without
running any code from the file.

A ``.pt``/``.pth``/``pytorch_model.bin`` file is a pickle: unpickling it with
Python's ``pickle`` may call any function the file names (``os.system`` included).
PyTorch's ``weights_only=True`` answers that with an allow-list; so does this
module, more strictly: the unpickler (Python's own pure-Python one, with its
``find_class``, ``REDUCE``, ``BUILD`` and object-creating opcodes replaced) resolves
a global only to a function or class of *this* module's table, calls only those,
and builds no object of any other class. Anything else — an unknown global, a
``__reduce__`` trick, a ``BUILD`` on a foreign object — raises `CheckpointError`
before anything is called.

What a checkpoint may hold: tensors (any strides and offsets, views of shared
storages, ``nn.Parameter``), dicts and ``OrderedDict`` (with their ``_metadata``),
lists, tuples, sets, ``None``, bools, numbers, strings, bytes, ``torch.Size``,
``torch.device`` and dtype names, NumPy scalars. Both container formats are read:
the zip archive (``archive/data.pkl`` + ``archive/data/<key>``, PyTorch >= 1.6) and
the legacy stream (magic number, protocol, system info, the object, the storage
keys, then each storage's bytes).
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile

import ml_dtypes
import numpy as np

from .errors import FileFormatError

# The legacy format's first pickled value, and the protocol version it writes next.
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

# torch.<Name>Storage -> the NumPy dtype of its elements.
STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_, "Float8_e4m3fnStorage": ml_dtypes.float8_e4m3fn,
}
# torch.<dtype> names a checkpoint may mention (as values, e.g. in metadata).
TORCH_DTYPE_NAMES = {
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "bool", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128", "uint16", "uint32", "uint64",
}


class CheckpointError(FileFormatError):
    """A PyTorch checkpoint that cannot be read safely or is malformed."""


class _StorageType:
    """What ``torch.FloatStorage`` & co. stand for: a dtype, never called."""

    def __init__(self, name, dtype):
        self.name, self.dtype = name, np.dtype(dtype)

    def __repr__(self):
        return f"torch.{self.name}"


class _Storage:
    """A storage named by a persistent id: its bytes are read on first use."""

    def __init__(self, key, dtype, numel, read):
        self.key, self.dtype, self.numel, self._read, self._array = key, dtype, numel, read, None

    def array(self) -> np.ndarray:
        if self._array is None:
            raw = self._read(self.key, self.numel * self.dtype.itemsize)
            if len(raw) != self.numel * self.dtype.itemsize:
                raise CheckpointError(f"storage {self.key!r} holds {len(raw)} bytes, "
                                      f"expected {self.numel} x {self.dtype.itemsize}")
            self._array = np.frombuffer(bytearray(raw), dtype=self.dtype)
        return self._array


class _Parameter:
    """``torch.nn.Parameter`` as a class name (for ``_rebuild_from_type_v2``)."""


class _TensorType:
    """``torch.Tensor`` as a class name (for ``_rebuild_from_type_v2``)."""


def _ints(values, what):
    if not isinstance(values, (tuple, list)) or not all(type(v) is int and v >= 0 for v in values):
        raise CheckpointError(f"bad tensor {what}: {values!r}")
    return tuple(values)


class _TensorRef:
    """A tensor named while unpickling; its values are taken once every storage has
    been read (the legacy format writes the storages after the object)."""

    def __init__(self, storage, storage_offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, storage_offset, size, stride

    def array(self) -> np.ndarray:
        """``size``/``stride`` over the storage from ``offset`` (bounds checked), as a
        C-contiguous array (views of one storage become copies)."""
        base, size, stride, offset = self.storage.array(), self.size, self.stride, self.offset
        if not all(size):
            if offset > len(base):
                raise CheckpointError(f"empty tensor at offset {offset} past its storage {self.storage.key!r}")
            return np.zeros(size, dtype=base.dtype)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= len(base):
            raise CheckpointError(f"tensor of size {size}, stride {stride} at offset {offset} "
                                  f"reaches past its storage {self.storage.key!r} of {len(base)} elements")
        item = base.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(base[offset:], shape=size,
                                               strides=tuple(s * item for s in stride), writeable=False)
        return np.array(view, order="C")  # a copy (ascontiguousarray would make a 0-d array 1-d)


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    if not isinstance(storage, _Storage):
        raise CheckpointError(f"a tensor's storage is {type(storage).__name__}, not a storage")
    if type(storage_offset) is not int or storage_offset < 0:
        raise CheckpointError(f"bad tensor storage offset: {storage_offset!r}")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    if len(size) != len(stride):
        raise CheckpointError(f"tensor size {size} and stride {stride} differ in length")
    return _TensorRef(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad=True, backward_hooks=None, state=None):
    if not isinstance(data, _TensorRef):
        raise CheckpointError(f"a parameter's data is {type(data).__name__}, not a tensor")
    return data


def _rebuild_from_type_v2(func, new_type, args, state):
    if func not in (_rebuild_tensor_v2, _rebuild_tensor, _rebuild_parameter):
        raise CheckpointError("a tensor subclass rebuilt by an unknown function")
    if new_type not in (_Parameter, _TensorType):
        raise CheckpointError("a tensor of an unknown subclass")
    return func(*args)


def _torch_size(values=()):
    return tuple(_ints(values, "size"))


def _torch_device(kind, index=None):
    if not isinstance(kind, str):
        raise CheckpointError(f"bad device: {kind!r}")
    return kind if index is None else f"{kind}:{index}"


def _ordered_dict(items=()):
    return collections.OrderedDict(items)


def _codecs_encode(text, encoding="utf-8"):
    # Protocol-2 pickles write bytes as _codecs.encode(str, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise CheckpointError("bytes encoded other than as latin-1")
    return text.encode("latin-1")


def _numpy_scalar(dtype, raw=None):
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(raw, bytes):
        raise CheckpointError("a NumPy scalar of an object dtype")
    return np.frombuffer(raw, dtype=dtype, count=1)[0]


def _numpy_dtype(spec, align=False, copy=False):
    if not isinstance(spec, str):
        raise CheckpointError(f"bad NumPy dtype: {spec!r}")
    d = np.dtype(spec)
    if d.hasobject:
        raise CheckpointError("a NumPy object dtype")
    return d


# (module, name) -> what it resolves to. Functions here are the only callables a
# checkpoint can reach; classes here are the only ones it can instantiate.
_GLOBALS = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch.nn.parameter", "Parameter"): _Parameter,
    ("torch", "Tensor"): _TensorType,
    ("torch", "Size"): _torch_size,
    ("torch", "device"): _torch_device,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    # protocol 2 writes Python 2's module name for builtins
    ("__builtin__", "set"): set,
    ("__builtin__", "frozenset"): frozenset,
    ("__builtin__", "complex"): complex,
    ("__builtin__", "slice"): slice,
    ("_codecs", "encode"): _codecs_encode,
    ("numpy.core.multiarray", "scalar"): _numpy_scalar,
    ("numpy._core.multiarray", "scalar"): _numpy_scalar,
    ("numpy", "dtype"): _numpy_dtype,
}
_GLOBALS.update({("torch", name): _StorageType(name, d) for name, d in STORAGE_DTYPES.items()})
_GLOBALS.update({("torch", name): f"torch.{name}" for name in TORCH_DTYPE_NAMES})
_CALLABLE = {id(v) for v in _GLOBALS.values() if callable(v) and not isinstance(v, (type, _StorageType))}
_CALLABLE.update(id(c) for c in (set, frozenset, complex, slice))
_CLASSES = (collections.OrderedDict, dict)


class _SafeUnpickler(pickle._Unpickler):
    """Python's pure-Python unpickler with every code-running opcode restricted."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, storage):
        super().__init__(file)
        self._storage = storage

    def find_class(self, module, name):
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            hint = (" The file holds a whole pickled module (torch.save(model)): save "
                    "model.state_dict() with PyTorch instead." if module.startswith("torch.nn.modules") else "")
            raise CheckpointError(
                f"refusing to load {module}.{name}: a PyTorch checkpoint read by tallow may hold "
                "only tensors, containers, numbers and strings (a pickle naming other "
                f"functions or classes can run code when loaded).{hint}") from None

    def persistent_load(self, pid):
        return self._storage(pid)

    def load_reduce(self):
        args = self.stack.pop()
        func = self.stack[-1]
        if id(func) not in _CALLABLE or not isinstance(args, tuple):
            raise CheckpointError(f"refusing to call {func!r} while loading a checkpoint")
        self.stack[-1] = func(*args)

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        # Only an OrderedDict's attributes (a state dict's ``_metadata``) and a
        # parameter's (ignored) state are set; nothing's __setstate__ is called.
        if isinstance(inst, _TensorRef):
            return
        if not isinstance(inst, collections.OrderedDict) or not isinstance(state, dict):
            raise CheckpointError(f"refusing to set the state of a {type(inst).__name__}")
        for k, v in state.items():
            if not isinstance(k, str) or k.startswith("__"):
                raise CheckpointError(f"refusing to set attribute {k!r}")
            setattr(inst, k, v)

    def _refuse_object(self, *args):
        raise CheckpointError("refusing to build an object of a class while loading a checkpoint")

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.BUILD[0]] = load_build
    for _op in (pickle.INST, pickle.OBJ, pickle.NEWOBJ, pickle.NEWOBJ_EX):
        dispatch[_op[0]] = _refuse_object
    del _op


def _storage_factory(read, legacy=False):
    """persistent_load for storages: one `_Storage` per key, shared by every tensor
    (a view, a tied weight) that names it."""
    made = {}

    def storage(pid):
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage" or len(pid) < 5:
            raise CheckpointError(f"unexpected persistent id in a checkpoint: {pid!r}")
        _, kind, key, _location, numel = pid[:5]
        if not isinstance(kind, _StorageType):
            raise CheckpointError(f"unknown storage type {kind!r}")
        if type(numel) is not int or numel < 0 or not isinstance(key, str):
            raise CheckpointError(f"bad storage entry {pid!r}")
        if legacy and len(pid) > 5 and pid[5] is not None:
            raise CheckpointError("storage views of the pre-1.0 format are not supported")
        if key not in made:
            made[key] = _Storage(key, kind.dtype, numel, read)
        elif made[key].dtype != kind.dtype:
            raise CheckpointError(f"storage {key!r} named with two dtypes")
        return made[key]

    return storage, made


def _load_zip(path):
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"{path}: not a readable PyTorch zip checkpoint ({e})") from None
    with zf:
        pickles = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: a PyTorch zip checkpoint has one data.pkl; found {len(pickles)}")
        prefix = pickles[0][: -len("data.pkl")]
        byteorder = f"{prefix}byteorder"
        if byteorder in zf.namelist() and zf.read(byteorder).strip() not in (b"little", b""):
            raise CheckpointError(f"{path}: big-endian checkpoints are not supported")

        def read(key, nbytes):
            try:
                return zf.read(f"{prefix}data/{key}")
            except KeyError:
                raise CheckpointError(f"{path}: storage {key!r} is missing from the archive") from None

        storage, made = _storage_factory(read)
        obj = _SafeUnpickler(io.BytesIO(zf.read(pickles[0])), storage).load()
        return _materialize(obj)


def _load_legacy(path):
    with open(path, "rb") as f:
        def header():
            return _SafeUnpickler(f, _no_storage).load()

        if header() != LEGACY_MAGIC:
            raise CheckpointError(f"{path}: not a PyTorch checkpoint (bad magic number)")
        if header() != LEGACY_PROTOCOL:
            raise CheckpointError(f"{path}: unsupported legacy checkpoint protocol")
        info = header()
        if isinstance(info, dict) and info.get("little_endian") is False:
            raise CheckpointError(f"{path}: big-endian checkpoints are not supported")
        data = {}
        storage, made = _storage_factory(lambda key, nbytes: data[key], legacy=True)
        obj = _SafeUnpickler(f, storage).load()
        keys = header()
        if not isinstance(keys, list) or set(keys) != set(made):
            raise CheckpointError(f"{path}: the storage list does not match the object's storages")
        for key in keys:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path}: truncated at storage {key!r}")
            (numel,) = struct.unpack("<q", head)
            if numel != made[key].numel:
                raise CheckpointError(f"{path}: storage {key!r} has {numel} elements, expected {made[key].numel}")
            data[key] = f.read(numel * made[key].dtype.itemsize)
        return _materialize(obj)


def _materialize(obj):
    """``obj`` with each tensor's values as a NumPy array (containers rebuilt, an
    OrderedDict's ``_metadata`` kept)."""
    if isinstance(obj, _TensorRef):
        return obj.array()
    if isinstance(obj, dict):
        out = type(obj)((k, _materialize(v)) for k, v in obj.items())
        meta = getattr(obj, "__dict__", {}).get("_metadata")
        if meta is not None:
            out._metadata = meta
        return out
    if isinstance(obj, (list, tuple)):
        items = [_materialize(v) for v in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def _no_storage(pid):
    raise CheckpointError("a storage in a checkpoint's header")


def is_torch_checkpoint(path) -> bool:
    """Whether ``path`` starts like a ``torch.save`` file (zip or legacy pickle)."""
    with open(path, "rb") as f:
        head = f.read(2)
    return head == b"PK" or head == b"\x80\x02"


def load_arrays(path):
    """The object in a ``torch.save`` file with every tensor as a NumPy array."""
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"PK":
        return _load_zip(path)
    if head[:1] == b"\x80":
        return _load_legacy(path)
    raise CheckpointError(f"{path}: not a PyTorch checkpoint (neither a zip archive nor a pickle)")
