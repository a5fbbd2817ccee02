"""Files (safetensors, npy/npz, GGUF), threads and backend availability."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

from ..atomic import atomic_write, write_bytes
from ..backends.cpu.threads import CONFIG as _THREADS
from ..device import Device, cpu
from ..errors import DTypeMismatchError, FileFormatError
from .. import dtype as dt
from ..safetensors_io import SAFETENSORS_NAMES, SafetensorsReader, serialize
from ..shape import parse_shape, parse_shape_with_hole
from ..tensor_class import Tensor


# -- threads ----------------------------------------------------------------------------

def get_num_threads() -> int:
    """Threads the CPU backend uses (see ``tallow info`` for the rule that chose it)."""
    return _THREADS.get()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads from now on in tallow's own pool (NumPy's BLAS stays on one
    thread: tallow splits large products itself)."""
    _THREADS.set(n)


def num_threads_rule() -> str:
    """The rule that chose the thread count, in words (affinity mask, cgroup quota, physical cores or ``TALLOW_NUM_THREADS``)."""
    return _THREADS.rule()


def parse_absolute_shape(*shape, element_count=None) -> list:
    """A shape as a list, with a -1 hole resolved against ``element_count``."""
    if element_count is None:
        return list(parse_shape(shape, "parse_absolute_shape"))
    return list(parse_shape_with_hole(shape, int(element_count), "parse_absolute_shape"))


# -- backends ----------------------------------------------------------------------------

def gpu_is_available() -> bool:
    """True when a WebGPU adapter can be opened (Metal, Vulkan, D3D12 or lavapipe)."""
    try:
        # The GPU backend (wgpu) loads only when asked for.
        from ..backends.gpu import adapter_available
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
    """Write ``tensors`` (name -> Tensor) to ``path``, atomically (see ``tallow.atomic``).
    Every dtype is written as the safetensors type of the same name (F4 and F6 packed)."""
    from safetensors.numpy import save

    arrays = _host_arrays("save_safetensors", tensors)
    if any(t.dtype in (dt.f4, dt.f6e2m3, dt.f6e3m2) for t in tensors.values()):
        # The format's library writes no F6 and only a paired F4: tallow's writer does.
        kinds = {n: (SAFETENSORS_NAMES[t.dtype], arrays[n]) for n, t in tensors.items()}
        write_bytes(path, serialize(kinds, metadata))
        return
    write_bytes(path, save(arrays, metadata=metadata))


def _host_arrays(op, tensors) -> dict:
    """name -> C-ordered host array, checked before anything is written."""
    if not isinstance(tensors, dict):
        raise DTypeMismatchError(f"{op}: expected a dict of name -> Tensor, got "
                                 f"{type(tensors).__name__}")
    arrays = {}
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise DTypeMismatchError(f"{op}: names must be strings, got {name!r}")
        if not isinstance(t, Tensor):
            raise DTypeMismatchError(f"{op}: {name!r} is a {type(t).__name__}, not a Tensor")
        arrays[name] = np.asarray(t._host(), order="C")
    return arrays


class SafetensorsFile(SafetensorsReader):
    """A lazily read safetensors file: names, shapes and dtypes up front, data on demand.

    The header is validated when the file opens (see ``tallow.safetensors_io``).
    """

    def __init__(self, path):
        _missing(str(path), "load_safetensors")
        super().__init__(path)

    def get(self, name, device=None):
        """The tensor ``name``, on ``device`` (default: the CPU, sharing the map)."""
        return super().get(name, device=Device.parse(device) if device else None)


# -- npy / npz ---------------------------------------------------------------------------

def load_npy(path, device=None):
    """The tensor of a ``.npy`` file (``FileFormatError`` for anything else, an archive included)."""
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
    """Write one tensor as ``.npy``, atomically (see ``tallow.atomic``)."""
    arr = _host_arrays("save_npy", {"tensor": tensor})["tensor"]
    with atomic_write(path) as f:
        np.save(f, arr, allow_pickle=False)


def load_npz(path, device=None) -> dict:
    """The tensors of an ``.npz`` archive, by name."""
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
    """Write name -> tensor as an ``.npz`` archive, atomically (see ``tallow.atomic``)."""
    arrays = _host_arrays("save_npz", tensors)
    with atomic_write(path) as f:
        np.savez(f, **arrays)


# -- gguf ----------------------------------------------------------------------------------

def load_gguf(path, device=None):
    # tallow.quantized loads on first use, as ``tl.quantized`` does.
    """The tensors (QTensors over the memory-mapped file) and the metadata of a GGUF file: ``(tensors, metadata)``."""
    from ..quantized.gguf_file import load_gguf as _load

    return _load(path, device=device)


def save_gguf(path, tensors, metadata) -> None:
    """Write a dict of tensors or QTensors and a metadata dict as a GGUF file."""
    from ..quantized.gguf_file import save_gguf as _save

    _save(path, tensors, metadata)

# ``tl.utils.data`` as ``torch.utils.data`` (bound last: it is built on the names above).
from . import data  # noqa: E402
