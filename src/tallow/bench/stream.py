"""The memory-bandwidth floor of a decode step, for ``tallow bench llm``.

Generating one token reads every weight of the model once (the output layer
included; with tied embeddings that is the token embedding, otherwise only one
row of it is read).  When those bytes do not fit in the caches, a decode step
cannot be faster than their size over the memory's streaming-read bandwidth.
:func:`read_bandwidth` measures that bandwidth the way a decode step meets it:
the same number of bytes, already resident, read from start to end by the same
number of threads, each a contiguous share.  A decode speed divided by the
floor's speed is the share of the bandwidth it uses (1.0: as fast as reading
the weights can be).
"""

from __future__ import annotations

import threading
import time

import numpy as np


def weight_bytes_per_token(path: str) -> int:
    """Bytes of a GGUF model's tensors that one decode step reads."""
    from ..ggml.gguf_io import read_gguf

    tensors = read_gguf(path).tensors
    total = sum(int(t.data.nbytes) for t in tensors.values())
    embd = tensors.get("token_embd.weight")
    if embd is not None and "output.weight" in tensors:  # untied: a lookup reads one row
        total -= int(embd.data.nbytes) - int(embd.data.nbytes) // int(embd.shape[0])
    return total


def read_bandwidth(nbytes: int, threads: int, passes: int = 10) -> dict:
    """Reading a resident ``nbytes`` buffer with ``threads`` threads, ``passes`` timed passes
    after an untimed one: ``read_gbps``, the fastest pass's bytes per second (the floor is
    what the memory allows; on a shared machine a slower pass measures the other
    processes), and ``read_cpu_s``, the least CPU time a pass took, summed over its
    threads (comparable with a decode step's CPU time when other work shares the cores)."""
    words = np.ones(max(1, nbytes // 8), np.uint64)  # written once: every page resident
    edges = np.linspace(0, words.size, threads + 1).astype(np.int64)
    parts = [words[a:b] for a, b in zip(edges[:-1], edges[1:])]
    sums, cpu = [0] * threads, [0.0] * threads

    def read(i):  # NumPy's reduction releases the GIL: the threads read at once
        c0 = time.thread_time()
        sums[i] = int(np.add.reduce(parts[i]))
        cpu[i] = time.thread_time() - c0

    def one_pass():
        workers = [threading.Thread(target=read, args=(i,)) for i in range(1, threads)]
        for w in workers:
            w.start()
        read(0)
        for w in workers:
            w.join()
        if sum(sums) != words.size:  # every word was read
            raise RuntimeError("the streaming read missed part of its buffer")
        return sum(cpu)

    one_pass()
    times, cpus = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        cpus.append(one_pass())
        times.append(time.perf_counter() - t0)
    return {"read_gbps": words.nbytes / min(times) / 1e9, "read_cpu_s": min(cpus)}
