"""Module: PyTorch-style registration of tensors and submodules (candle-pyo3's semantics).

Assigning a ``Tensor`` to a module attribute registers it (candle-pyo3 calls every
such tensor a buffer), assigning a ``Module`` registers a submodule. A tensor is a
*parameter* unless it was registered with ``register_buffer`` (running statistics,
caches): ``parameters()`` lists the parameters, ``buffers()`` every tensor.
Whether a parameter is trainable is whether it is a ``Var``: layers built from
scratch hold Vars, layers loaded from files plain tensors, and
``requires_grad_(flag)`` turns one into the other. ``state_dict`` /
``load_state_dict`` walk both, with PyTorch's key names and error messages. A
quantized tensor (any object with ``dequantize()`` and ``ggml_dtype``) assigned to a
name listed in ``_quantizable_buffers`` is kept as it is; elsewhere it is dequantized.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from ..device import Device
from ..tensor_class import Tensor
from ..var import Var


def is_quantized(value) -> bool:
    """True for a quantized tensor (a QTensor or anything shaped like one)."""
    return (not isinstance(value, Tensor) and hasattr(value, "dequantize")
            and hasattr(value, "ggml_dtype") and hasattr(value, "shape"))


def _shape_of(value):
    shape = value.shape
    return tuple(shape) if not isinstance(shape, tuple) else shape


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class Module:
    """Base class of every layer and model."""

    _version: int = 1

    def __init__(self, *args, **kwargs) -> None:
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_quantizable_buffers", set())
        # Names registered through register_buffer: tensors that are not parameters.
        object.__setattr__(self, "_buffer_names", set())
        object.__setattr__(self, "training", True)

    # -- calling -----------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    # -- attribute registration ---------------------------------------------------------
    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() is called"
            )
        modules, buffers = self.__dict__["_modules"], self.__dict__["_buffers"]
        if isinstance(value, Module):
            buffers.pop(name, None)
            self.__dict__.pop(name, None)
            modules[name] = value
        elif isinstance(value, Tensor):
            modules.pop(name, None)
            self.__dict__.pop(name, None)
            buffers[name] = value
            if isinstance(value, Var):  # a Var is a parameter (torch's nn.Parameter)
                self.__dict__["_buffer_names"].discard(name)
        elif is_quantized(value):
            modules.pop(name, None)
            self.__dict__.pop(name, None)
            buffers[name] = self._quantized_value(name, value)
        elif value is None and (name in buffers or name in modules):
            if name in buffers:
                buffers[name] = None
            else:
                modules[name] = None
        else:
            buffers.pop(name, None)
            modules.pop(name, None)
            object.__setattr__(self, name, value)

    def _quantized_value(self, name, q):
        if name in self._quantizable_buffers:
            if str(q.ggml_dtype).lower() in ("f32", "f16", "bf16"):
                # Float blocks become the f32 tensor candle's QMatMul::from_arc makes
                # of them: an ordinary product, for the f32 inputs a model feeds it.
                return q.dequantize()
            return q
        return q.dequantize()

    def __getattr__(self, name):
        d = self.__dict__
        if "_modules" in d:
            if name in d["_modules"]:
                return d["_modules"][name]
            if name in d["_buffers"]:
                return d["_buffers"][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name):
        if name in self._buffers:
            del self._buffers[name]
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def add_module(self, name: str, module) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string, got {type(name).__name__}")
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name not in self._modules and (name in self._buffers or name in self.__dict__):
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        if tensor is not None and not isinstance(tensor, Tensor) and not is_quantized(tensor):
            raise TypeError(f"cannot assign a {type(tensor).__name__} as buffer {name!r}")
        if "." in name or name == "":
            raise KeyError(f"invalid buffer name {name!r}")
        self._buffers[name] = tensor
        self._buffer_names.add(name)
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    # -- walking --------------------------------------------------------------------------
    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from m.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in m._buffers.items():
                if v is None or id(v) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + k, v

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def register_parameter(self, name: str, param) -> None:
        """Register ``param`` (a ``Var`` to train it, a plain tensor, or None) as a parameter."""
        if param is not None and not isinstance(param, Tensor) and not is_quantized(param):
            raise TypeError(f"cannot assign a {type(param).__name__} as parameter {name!r}")
        if not isinstance(name, str) or "." in name or name == "":
            raise KeyError(f"invalid parameter name {name!r}")
        self._buffers[name] = param
        self._buffer_names.discard(name)

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        """``(name, tensor)`` for every parameter: each tensor not registered with
        ``register_buffer``. A trainable one is a ``Var``; a plain tensor is frozen
        (``requires_grad_(True)`` makes it a Var). Tied tensors are listed once."""
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in m._buffers.items():
                if v is None or k in m._buffer_names or id(v) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + k, v

    def parameters(self, recurse: bool = True):
        """The parameters (see ``named_parameters``); pass them to an optimiser."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Make every float parameter trainable (a ``Var``) or frozen (a plain tensor).

        ``True`` copies each plain parameter into a new Var (a memory-mapped weight is
        then read into memory), so operations on it are recorded for ``backward``;
        ``False`` swaps each Var for a plain tensor over the same data, so inference
        records nothing. Freezing then unfreezing gives back the same Var objects (with
        the slot's current value, if a load replaced it meanwhile), so an optimiser
        built before keeps updating them. Quantized weights and buffers stay as they
        are. Tensors shared by two modules stay shared. Returns ``self``.
        """
        done = {}
        for m in self.modules():
            # name -> weak reference to the Var the slot held when frozen: kept alive only
            # by whoever still uses it (an optimiser), never by the module.
            frozen = m.__dict__.setdefault("_frozen_vars", {})
            for name, t in list(m._buffers.items()):
                if not isinstance(t, Tensor) or name in m._buffer_names or not t.dtype.is_float:
                    continue
                if id(t) in done:
                    m._buffers[name] = done[id(t)][1]
                    continue
                new = t
                if requires_grad and not isinstance(t, Var):
                    ref = frozen.pop(name, None)
                    old = ref() if ref is not None else None
                    if old is not None and old.shape == t.shape:
                        # The Var this slot was frozen from: it takes the current value
                        # (a load while frozen replaced the tensor), so an optimiser
                        # holding it keeps training this parameter.
                        if old._storage is not t._storage or old._layout != t._layout:
                            old._adopt(t.copy())
                        new = old
                    else:
                        new = Var(t)
                elif not requires_grad and isinstance(t, Var):
                    new = t.detach()
                    frozen[name] = weakref.ref(t)
                done[id(t)] = (t, new)
                m._buffers[name] = new
        return self

    def __getstate__(self):
        # The weak references to frozen Vars do not pickle, and a copy's Vars are new
        # objects anyway: a copy starts without them.
        state = self.__dict__.copy()
        state.pop("_frozen_vars", None)
        return state

    # -- training mode ---------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (Dropout drops, BatchNorm uses and updates batch statistics)
        on this module and every submodule. Returns ``self``."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        """``train(False)``: Dropout is the identity, BatchNorm uses its running statistics."""
        return self.train(False)

    def float(self) -> "Module":
        """Cast the float tensors to f32."""
        return self.to("f32")

    def double(self) -> "Module":
        """Cast the float tensors to f64."""
        return self.to("f64")

    def half(self) -> "Module":
        """Cast the float tensors to f16."""
        return self.to("f16")

    def bfloat16(self) -> "Module":
        """Cast the float tensors to bf16."""
        return self.to("bf16")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the ``.grad`` of every Var parameter (None, or zeros in place with
        ``set_to_none=False``), as PyTorch's ``Module.zero_grad``."""
        for p in self.parameters():
            g = getattr(p, "grad", None)
            if g is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                g.zero_()

    def apply(self, fn) -> "Module":
        """Call ``fn`` on every submodule (children first) and on this module."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -- state dicts -----------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        if args:
            destination = args[0] if destination is None else destination
            if len(args) > 1 and prefix == "":
                prefix = args[1]
            if len(args) > 2 and keep_vars is False:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = dict(version=self._version)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, buf in self._buffers.items():
            if buf is None or name in self._non_persistent_buffers_set:
                continue
            if isinstance(buf, Tensor) and not keep_vars:
                buf = buf.detach()
            destination[prefix + name] = buf

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy tensors from ``state_dict`` into this module and its submodules.

        ``strict``: every key must match. Shapes must match. Returns
        ``(missing_keys, unexpected_keys)``; raises RuntimeError listing every problem.
        A ``Var`` takes the new value in place (converted to its dtype and device, as
        PyTorch's ``copy_``; with ``assign=True`` it takes the checkpoint's dtype and
        device), so an optimiser holding it keeps training the model; other tensors are
        replaced (candle-pyo3).
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)

        def load(module, local, prefix=""):
            meta = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            meta["assign_to_params_buffers"] = bool(assign)
            # Missing and unexpected keys are always collected (and returned, as PyTorch
            # does); only ``strict`` turns them into an error.
            module._load_from_state_dict(local, prefix, meta, True, missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    p = prefix + name + "."
                    load(child, {k: v for k, v in local.items() if k.startswith(p)}, p)

        load(self, state_dict)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        local = {k: v for k, v in self._buffers.items()
                 if v is not None and k not in self._non_persistent_buffers_set}
        for name, current in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor) and not is_quantized(value):
                error_msgs.append(
                    f'While copying the parameter named "{key}", expected Tensor-like object '
                    f"from checkpoint but received {type(value)}")
                continue
            if _shape_of(value) != _shape_of(current):
                error_msgs.append(
                    f"size mismatch for {key}: copying a param with shape {_shape_of(value)} "
                    f"from checkpoint, the shape in current model is {_shape_of(current)}.")
                continue
            try:
                if isinstance(current, Var) and isinstance(value, Tensor):
                    if local_metadata.get("assign_to_params_buffers"):
                        # assign=True: the Var takes the checkpoint's dtype and device
                        # but stays the same object, so optimisers keep following it.
                        current._adopt(value.detach().copy())
                    else:
                        current.set(value.to_dtype(current.dtype).to_device(current.device))
                else:
                    setattr(self, name, value)
            except Exception as e:  # reported with the others, as PyTorch does
                error_msgs.append(
                    f'While copying the parameter named "{key}", whose dimensions in the model '
                    f"are {_shape_of(current)} and whose dimensions in the checkpoint are "
                    f"{_shape_of(value)}, an exception occurred : {e.args}.")
        if strict:
            for key in state_dict:
                if key.startswith(prefix):
                    # PyTorch's rule: "a.b" must go to a submodule "a", and a plain name
                    # must be one of this module's tensors.
                    parts = key[len(prefix):].split(".", 1)
                    known = self._modules if len(parts) > 1 else local
                    if parts[0] not in known:
                        unexpected_keys.append(key)

    # -- moving and casting ------------------------------------------------------------------
    def _apply(self, fn, _done=None):
        # _done: id of each tensor converted so far -> its result, so a tensor shared by
        # two modules (tied weights) is converted once and stays shared.
        done = {} if _done is None else _done
        for m in self.children():
            m._apply(fn, done)
        for k, buf in self._buffers.items():
            if buf is not None:
                if id(buf) in done:
                    self._buffers[k] = done[id(buf)][1]
                    continue
                if isinstance(buf, Var):
                    # The Var takes the converted data and stays the same object, as
                    # PyTorch moves a Parameter's data: an optimiser holding it keeps
                    # training the model after model.to(device) or .type(dtype).
                    new = fn(buf.detach())
                    if isinstance(new, Tensor) and new._storage is not buf._storage:
                        buf._adopt(new)
                    new = buf
                else:
                    new = fn(buf)
                done[id(buf)] = (buf, new)  # buf kept alive, so its id is not reused
                self._buffers[k] = new
        return self

    @staticmethod
    def _move(t, device):
        if isinstance(t, Tensor):
            return t.to_device(device)
        if hasattr(t, "to_device"):
            return t.to_device(device)
        raise NotImplementedError(f"cannot move a {type(t).__name__} to {device}")

    def device(self):
        """The device of the module's first tensor."""
        for b in self.buffers():
            return b.device
        return Device.cpu()

    def cpu(self):
        return self._apply(lambda t: self._move(t, Device.cpu()))

    def gpu(self, ordinal: int = 0):
        dev = Device.gpu(ordinal)
        return self._apply(lambda t: self._move(t, dev))

    def cuda(self, device=None):
        """PyTorch's ``cuda()`` has no meaning here: tallow has no CUDA backend. Raises
        with the call to use instead (``model.to("gpu")``, WebGPU)."""
        from ..errors import TallowError

        raise TallowError(
            f"{type(self).__name__}.cuda(): tallow has no CUDA backend; its GPU device is "
            "'gpu' (WebGPU): use model.to('gpu') or model.gpu(), and x.to('gpu') for the "
            "inputs")

    def type(self, dtype):
        from ..dtype import DType

        dtype = DType.parse(dtype)

        def cast(t):
            if isinstance(t, Tensor):
                return t.to_dtype(dtype) if t.dtype.is_float else t
            raise TypeError(f"Module.type: cannot cast a {type(t).__name__} to {dtype}")
        return self._apply(cast)

    def to(self, *args, **kwargs):
        """Move and/or cast every tensor (in place): ``to(device)``, ``to(dtype)``, both."""
        from ..dtype import DType
        from ..errors import TallowError

        device = dtype = None
        for arg in args:
            if isinstance(arg, Device):
                device = arg
            elif isinstance(arg, DType):
                dtype = arg
            elif isinstance(arg, str):
                try:
                    device = Device.parse(arg)
                except TallowError as device_error:
                    try:
                        dtype = DType.parse(arg)
                    except TallowError:
                        if arg.strip().lower().partition(":")[0] in ("cuda", "metal", "mps"):
                            raise device_error from None  # says which device to use instead
                        raise TypeError(f"Module.to: {arg!r} is neither a device nor a dtype") from None
            else:
                raise TypeError(f"Module.to() received an invalid argument: {arg!r}")
        if "device" in kwargs:
            device = Device.parse(kwargs.pop("device"))
        if "dtype" in kwargs:
            dtype = DType.parse(kwargs.pop("dtype"))
        if kwargs:
            raise TypeError(f"Module.to: unexpected keyword arguments {sorted(kwargs)}")
        if dtype is not None and not dtype.is_float:
            raise TypeError(f"Module.to only accepts floating point dtypes, got {dtype}")

        def convert(t):
            if dtype is not None and isinstance(t, Tensor) and t.dtype.is_float:
                t = t.to_dtype(dtype)
            if device is not None:
                t = self._move(t, device)
            return t
        return self._apply(convert)

    # -- printing ------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = []
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "(" + self.extra_repr()
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"
