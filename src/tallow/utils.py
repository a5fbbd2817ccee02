"""Files (safetensors, npy/npz, GGUF), threads and backend availability."""

from __future__ import annotations

import os

import numpy as np

from .backends.cpu.threads import CONFIG as _THREADS
from .device import Device, cpu
from .errors import FileFormatError


# -- threads ----------------------------------------------------------------------------

def get_num_threads() -> int:
    """Threads the CPU backend uses (see ``tallow info`` for the rule that chose it)."""
    return _THREADS.get()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads from now on, in tallow's own pool and NumPy's BLAS."""
    _THREADS.set(n)


def num_threads_rule() -> str:
    """The rule that chose the thread count, in words (affinity mask, cgroup quota, physical cores or ``TALLOW_NUM_THREADS``)."""
    return _THREADS.rule()


def parse_absolute_shape(*shape, element_count=None) -> list:
    """A shape as a list, with a -1 hole resolved against ``element_count``."""
    from .shape import parse_shape, parse_shape_with_hole

    if element_count is None:
        return list(parse_shape(shape, "parse_absolute_shape"))
    return list(parse_shape_with_hole(shape, int(element_count), "parse_absolute_shape"))


# -- backends ----------------------------------------------------------------------------

def gpu_is_available() -> bool:
    """True when a WebGPU adapter can be opened (Metal, Vulkan, D3D12 or lavapipe)."""
    try:
        from .backends.gpu import adapter_available
    except ImportError:
        return False
    return adapter_available()


def cuda_is_available() -> bool:
    """Always False: tallow has no CUDA backend (its GPU backend is WebGPU, see ``gpu_is_available``)."""
    return False


def has_mkl() -> bool:
    """True when NumPy's BLAS is Intel MKL."""
    return any("mkl" in str(d.get("internal_api", "")).lower() for d in _THREADS.blas_info())


def has_accelerate() -> bool:
    """Always False: tallow does not link Apple's Accelerate (NumPy's BLAS serves)."""
    return False


# -- safetensors --------------------------------------------------------------------------

def _missing(path, what):
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: no such file: {path}")


def safetensors_paths(path) -> list:
    """The files behind ``path``: one file, a list of files, or every .safetensors in a folder."""
    if isinstance(path, (list, tuple)):
        return [str(p) for p in path]
    path = str(path)
    if os.path.isdir(path):
        files = sorted(
            os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors")
        )
        if not files:
            raise FileNotFoundError(f"load_safetensors: no .safetensors files in {path}")
        return files
    return [path]


def load_safetensors(path, device=cpu) -> dict:
    """Every tensor of a ``.safetensors`` file (or a list of files, or a folder of them)."""
    out = {}
    for p in safetensors_paths(path):
        with SafetensorsFile(p) as f:
            for name in f.keys():
                if name in out:
                    raise FileFormatError(f"{p}: tensor {name!r} also appears in another file")
                out[name] = f.get(name, device=device)
    return out


def save_safetensors(path, tensors: dict, metadata: dict | None = None) -> None:
    """Write a dict of tensors as a ``.safetensors`` file, with optional string metadata."""
    from safetensors.numpy import save_file

    from .tensor import Tensor

    arrays = {}
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"save_safetensors: {name!r} is a {type(t).__name__}, not a Tensor")
        arrays[name] = np.asarray(t._host(), order="C")
    save_file(arrays, str(path), metadata=metadata)


class SafetensorsFile:
    """A lazily read safetensors file: names, shapes and dtypes up front, data on demand."""

    def __init__(self, path):
        from safetensors import SafetensorError, safe_open

        self.path = str(path)
        _missing(self.path, "load_safetensors")
        try:
            self._f = safe_open(self.path, framework="numpy")
            self._keys = list(self._f.keys())
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            raise FileFormatError(f"{self.path}: not a valid safetensors file ({e})") from None
        self.metadata = self._f.metadata() or {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._f = None

    def keys(self):
        return list(self._keys)

    def __contains__(self, name):
        return name in self._keys

    def shape(self, name):
        return tuple(self._f.get_slice(name).get_shape())

    def dtype(self, name):
        from .dtype import DType

        st = self._f.get_slice(name).get_dtype()
        if st not in _SAFETENSORS_DTYPES:
            raise self._unsupported(name, st)
        return DType.parse(_SAFETENSORS_DTYPES[st])

    def _unsupported(self, name, what):
        from .errors import UnsupportedDTypeError

        return UnsupportedDTypeError(
            f"{self.path}: tensor {name!r} has dtype {what}, which tallow cannot hold "
            f"(supported: {', '.join(sorted(set(_SAFETENSORS_DTYPES)))})"
        )

    def get(self, name, device=None):
        from safetensors import SafetensorError

        if name not in self._keys:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        try:
            arr = self._f.get_tensor(name)
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            raise FileFormatError(f"{self.path}: cannot read tensor {name!r} ({e})") from None
        from .dtype import from_numpy_dtype
        from .errors import UnsupportedDTypeError
        from .tensor import adopt_array
        from ._construct import make
        from .layout import Layout

        try:
            # Types tallow lacks widen losslessly, as for arrays (and candle: I32 -> i64).
            dtype = from_numpy_dtype(arr.dtype, allow_widening=True)
        except UnsupportedDTypeError:
            raise self._unsupported(name, self._f.get_slice(name).get_dtype()) from None
        arr = np.asarray(arr, dtype=dtype.np, order="C")
        return make(adopt_array(arr, dtype, Device.parse(device) if device else cpu),
                    Layout.contiguous_of(arr.shape))


_SAFETENSORS_DTYPES = {
    "U8": "u8", "U32": "u32", "I64": "i64", "F16": "f16", "BF16": "bf16", "F32": "f32",
    "F64": "f64",
    # Widened on load (lossless), as NumPy arrays of these types are.
    "BOOL": "u8", "I8": "i64", "I16": "i64", "I32": "i64", "U16": "u32",
}


# -- npy / npz ---------------------------------------------------------------------------

def load_npy(path, device=None):
    """The tensor of a ``.npy`` file (``FileFormatError`` for anything else, an archive included)."""
    from .tensor import Tensor

    _missing(str(path), "load_npy")
    try:
        arr = np.load(str(path), allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise FileFormatError(f"{path}: not a valid .npy file ({e})") from None
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise FileFormatError(f"{path}: holds an archive, not one array (use load_npz)")
    return Tensor(arr, device=device)


def save_npy(path, tensor) -> None:
    """Write one tensor as a ``.npy`` file (NumPy's format, no pickles)."""
    np.save(str(path), np.asarray(tensor._host(), order="C"), allow_pickle=False)


def load_npz(path, device=None) -> dict:
    """The tensors of an ``.npz`` archive, by name."""
    import zipfile
    import zlib

    from .tensor import Tensor

    _missing(str(path), "load_npz")
    try:
        z = np.load(str(path), allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise FileFormatError(f"{path}: holds one array, not an .npz archive (use load_npy)")
        with z:
            return {k: Tensor(z[k], device=device) for k in z.files}
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, KeyError, zlib.error) as e:
        if isinstance(e, FileFormatError):
            raise
        raise FileFormatError(f"{path}: not a valid .npz archive ({e})") from None


def save_npz(path, tensors: dict) -> None:
    """Write a dict of tensors as an uncompressed ``.npz`` archive."""
    np.savez(str(path), **{k: np.asarray(t._host(), order="C") for k, t in tensors.items()})


# -- gguf ----------------------------------------------------------------------------------

def load_gguf(path, device=None):
    """The tensors (QTensors over the memory-mapped file) and the metadata of a GGUF file: ``(tensors, metadata)``."""
    from .quantized.gguf_file import load_gguf as _load

    return _load(path, device=device)


def save_gguf(path, tensors, metadata) -> None:
    """Write a dict of tensors or QTensors and a metadata dict as a GGUF file."""
    from .quantized.gguf_file import save_gguf as _save

    _save(path, tensors, metadata)
