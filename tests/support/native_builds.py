"""Running a compiled module's work in each of its builds and at one and two threads."""

from __future__ import annotations

import tallow as tl
from tallow.backends.cpu import native


def each_build_and_thread_count(module):
    """Yields (simd, avx512, threads) for the module's baseline build, its AVX2 one and
    its AVX-512 one (those the CPU and the module have) at one and two threads, with the
    compiled pool splitting every task whatever its size and the machine's load; the
    module's switches, the thread count and the pool's settings are restored afterwards."""
    w = native._workers
    has_zmm = hasattr(module, "avx512")
    zmm = module.avx512() if has_zmm else False
    before, simd, min_bytes = tl.utils.get_num_threads(), module.simd(), w.min_bytes()
    try:
        for build, wide in sorted({(False, False), (simd, False), (simd, zmm)}):
            module.set_simd(build)
            if has_zmm:
                module.set_avx512(wide)
            for threads in (1, 2):
                tl.utils.set_num_threads(threads)
                native.sync_threads()
                w.set_min_bytes(0)
                w.set_load_check(False)
                yield build, wide, threads
    finally:
        module.set_simd(simd)
        if has_zmm:
            module.set_avx512(zmm)
        w.set_load_check(True)
        w.set_min_bytes(min_bytes)
        tl.utils.set_num_threads(before)
