"""Every writer on a full disk: the error names the path, the old file stays intact.

A monkeypatched file object accepts a few bytes and then fails with ENOSPC (a
short write, as a full disk gives); one test runs a real short write in a child
process whose file-size limit is tiny.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import tallow as tl
from tallow.errors import FileWriteError, TallowError

OLD = b"the previous good file\n" * 10


class ShortWriteFile:
    """A file that takes ``budget`` bytes, then raises ENOSPC mid-write."""

    def __init__(self, f, budget):
        self._f = f
        self._left = budget

    def write(self, data):
        if isinstance(data, str):
            raw = data.encode()
        else:
            raw = memoryview(data).cast("B").tobytes()
        if len(raw) > self._left:
            take = self._left
            if take:
                self._f.write(data[:take] if isinstance(data, str) else raw[:take])
            self._left = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self._left -= len(raw)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __iter__(self):
        return iter(self._f)


@pytest.fixture
def full_disk(monkeypatch):
    real = os.fdopen

    def fdopen(fd, *args, **kwargs):
        return ShortWriteFile(real(fd, *args, **kwargs), budget=64)

    monkeypatch.setattr(os, "fdopen", fdopen)


def _tensor():
    return tl.tensor(np.arange(4096, dtype=np.float32).reshape(64, 64))


def _qtensor():
    from tallow.quantized import QTensor

    return QTensor.quantize(_tensor(), "q8_0")


def _fig():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 4, 9])
    return fig


def _write_embeddings(ext):
    from tallow.models.cli import write_embeddings

    return lambda p: write_embeddings(p, ["a", "b"], np.ones((2, 512), np.float32))


WRITERS = {
    "safetensors": ("w.safetensors", lambda p: tl.utils.save_safetensors(p, {"w": _tensor()})),
    "gguf": ("w.gguf", lambda p: tl.utils.save_gguf(p, {"w": _qtensor()}, {})),
    "npy": ("w.npy", lambda p: tl.utils.save_npy(p, _tensor())),
    "npz": ("w.npz", lambda p: tl.utils.save_npz(p, {"a": _tensor(), "b": _tensor()})),
    "varmap": ("vars.safetensors", lambda p: _varmap_save(p)),
    "embed-npy": ("out.npy", _write_embeddings("npy")),
    "embed-jsonl": ("out.jsonl", _write_embeddings("jsonl")),
    "bench-json": ("bench.json", lambda p: _bench_json(p)),
    "bench-plot": ("plot.png", lambda p: _bench_plot(p)),
}


def _varmap_save(p):
    vm = tl.nn.VarMap()
    vm.get((64, 64), "w")
    vm.save(p)


def _bench_json(p):
    from tallow.bench.common import write_json

    write_json(p, {"rows": [{"n": i, "ms": i * 0.5} for i in range(200)]})


def _bench_plot(p):
    from tallow.bench.common import save_figure

    save_figure(_fig(), p)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_writer_on_full_disk_keeps_old_file(tmp_path, full_disk, writer):
    name, write = WRITERS[writer]
    path = tmp_path / name
    path.write_bytes(OLD)
    with pytest.raises(FileWriteError) as e:
        write(str(path))
    assert str(path) in str(e.value)
    assert isinstance(e.value, TallowError) and isinstance(e.value, OSError)
    assert path.read_bytes() == OLD
    assert sorted(os.listdir(tmp_path)) == [name], "a temporary file was left behind"


@pytest.mark.parametrize("writer", list(WRITERS))
def test_writer_without_failure_replaces_file(tmp_path, writer):
    name, write = WRITERS[writer]
    path = tmp_path / name
    path.write_bytes(OLD)
    os.chmod(path, 0o640)
    write(str(path))
    assert path.read_bytes() != OLD and path.stat().st_size > 0
    assert (path.stat().st_mode & 0o777) == 0o640, "the old file's permissions are kept"
    assert sorted(os.listdir(tmp_path)) == [name]


def test_new_file_gets_umask_permissions(tmp_path):
    path = tmp_path / "new.npy"
    tl.utils.save_npy(str(path), _tensor())
    umask = os.umask(0)
    os.umask(umask)
    assert (path.stat().st_mode & 0o777) == (0o666 & ~umask)


def test_exception_while_producing_content_keeps_old_file(tmp_path):
    from tallow.atomic import atomic_write

    path = tmp_path / "x.bin"
    path.write_bytes(OLD)
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write(b"partial")
            raise RuntimeError("boom")
    assert path.read_bytes() == OLD
    assert os.listdir(tmp_path) == ["x.bin"]


def test_real_short_write_with_a_file_size_limit(tmp_path):
    """A child process may write only 4 KiB per file: a real EFBIG mid-write."""
    path = tmp_path / "big.npy"
    path.write_bytes(OLD)
    code = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
import numpy as np, tallow as tl
from tallow.errors import FileWriteError
try:
    tl.utils.save_npy({str(path)!r}, tl.tensor(np.ones(100000, np.float32)))
except FileWriteError as e:
    print("FileWriteError", e)
    sys.exit(0)
sys.exit(3)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(path) in r.stdout
    assert path.read_bytes() == OLD
    assert os.listdir(tmp_path) == ["big.npy"]
