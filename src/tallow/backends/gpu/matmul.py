"""Matrix products: a register-tiled GEMM (128 x 128 tiles) and a matrix-vector path
for m == 1 or n == 1.

Every batch index is decomposed over the batch dims with each operand's own
strides, so non-mergeable batch strides (a narrowed 4-D operand) and broadcast
batches (stride 0) are right; candle's Metal kernel uses one batch stride and
silently reads the wrong elements for the first case.
"""

from __future__ import annotations

from ...errors import TallowError
from ...layout import Layout
from .kernels import family
from .kernel_args import max_groups, merge_dims, split_groups
from .launch import compact_via_host


GEMM = family("gemm", [("a", "in", 0), ("b", "in", 0), ("y", "atomic", 0)])
MAX_BATCH_RANK = 6
# The GEMM's output tile (gemm.wgsl): one workgroup computes TILE x TILE outputs.
TILE = 128


def _batch_words(batch_shape, a_strides, b_strides):
    pad = (0,) * (MAX_BATCH_RANK - len(batch_shape))
    return (tuple(batch_shape) + pad + (0, 0) + tuple(a_strides) + pad + (0, 0)
            + tuple(b_strides) + pad + (0, 0))


class GpuMatmul:
    """Batched matmul of ``GpuStorage`` (tiled GEMM kernels)."""

    __slots__ = ()

    def matmul(self, lhs_layout, rhs, rhs_layout):
        state = self.bdev
        dtype = self.dtype
        a_shape, b_shape = lhs_layout.shape, rhs_layout.shape
        m, k = a_shape[-2], a_shape[-1]
        n = b_shape[-1]
        batch_dims = a_shape[:-2]
        nb = 1
        for d in batch_dims:
            nb *= d
        out = state.empty(nb * m * n, dtype)
        if nb * m * n == 0:
            return out
        if k == 0:
            out.fill_inplace(Layout.contiguous_of((nb * m * n,)), 0)
            return out
        lhs = self  # the storage the kernel reads as A
        bshape, (abst, bbst) = merge_dims(batch_dims, (lhs_layout.stride[:-2], rhs_layout.stride[:-2]))
        if len(bshape) > MAX_BATCH_RANK:
            # No kernel reads these batch dims: multiply compact copies of both operands.
            lhs, lhs_layout = compact_via_host(self, lhs_layout)
            rhs, rhs_layout = compact_via_host(rhs, rhs_layout)
            bshape, (abst, bbst) = merge_dims(batch_dims, (lhs_layout.stride[:-2], rhs_layout.stride[:-2]))
        for x in (lhs, rhs, out):
            if x.buf.size > state.max_binding:
                raise TallowError(
                    f"matmul: an operand of {x.buf.size} bytes exceeds the adapter's max storage "
                    f"binding size ({state.max_binding} bytes); split the product (e.g. by rows)")
        sam, sak = lhs_layout.stride[-2], lhs_layout.stride[-1]
        sbk, sbn = rhs_layout.stride[-2], rhs_layout.stride[-1]
        bw = _batch_words(bshape, abst, bbst)
        cmd = state.commands
        key = (dtype.name,)
        if m == 1 or n == 1:
            # y (R outputs) = matrix (R, k) . vector (k)
            if n == 1:
                R, sr, sk, sv, mat_b = m, sam, sak, sbk, False
            else:
                R, sr, sk, sv, mat_b = n, sbn, sbk, sak, True
            rows_wg = sk == 1 or R < 256
            pipe = state.kernels.get(GEMM, key, "gemv", (("MAT_IS_B", mat_b), ("ROWS_WG", rows_wg)))
            # The kernel numbers its workgroups row-major over (x, y): any 2-D grid works.
            groups = R if rows_wg else (R + 255) // 256
            limit = max_groups(state)
            gx, gy = split_groups(groups, limit)
            with cmd.lock:
                for z0 in range(0, nb, limit):
                    words = (R, k, 0, z0, lhs_layout.start_offset, rhs_layout.start_offset,
                             sr, sk, sv, 0, len(bshape), 0, 0, 0, 0, 0) + bw
                    cmd.dispatch(pipe, (lhs.buf, rhs.buf, out.buf), words, gx, gy, min(limit, nb - z0))
            return out
        aligned = m % TILE == 0 and n % TILE == 0 and k % 16 == 0
        # 8-byte types take 8-deep k-slices: 16 would pass 16 KiB of workgroup memory.
        consts = (("BK", 8 if dtype.size_in_bytes == 8 else 16), ("A_MMAJOR", sam == 1 and sak != 1),
                  ("B_KMAJOR", sbk == 1 and sbn != 1), ("ALIGNED", aligned))
        pipe = state.kernels.get(GEMM, key, "gemm", consts)
        tiles_n, tiles_m = (n + TILE - 1) // TILE, (m + TILE - 1) // TILE
        limit = max_groups(state)
        with cmd.lock:
            # More tiles than a dispatch may have per dimension: several dispatches, each
            # told its first tile row and column (words 11, 12).
            for z0 in range(0, nb, limit):
                for y0 in range(0, tiles_m, limit):
                    for x0 in range(0, tiles_n, limit):
                        words = (m, n, k, z0, lhs_layout.start_offset, rhs_layout.start_offset,
                                 sam, sak, sbk, sbn, len(bshape), y0, x0, 0, 0, 0) + bw
                        cmd.dispatch(pipe, (lhs.buf, rhs.buf, out.buf), words,
                                     min(limit, tiles_n - x0), min(limit, tiles_m - y0),
                                     min(limit, nb - z0))
        return out
