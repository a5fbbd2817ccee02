"""The numba kernel that runs a fused element-wise chain on the CPU (loaded on first use).

One compiled kernel serves every chain: it runs the chain's instruction list over
the elements block by block, keeping intermediates in a few block-sized registers
that stay in the L1/L2 cache, so a chain of k ops reads its inputs and writes its
live results once instead of k times, with no Python between the ops. Each
instruction is a plain loop the compiler vectorises; every op computes in the
storage dtype exactly as NumPy's loop does (IEEE add/sub/mul/div/sqrt are correctly
rounded either way), so the results are bit-identical to eager. The kernel follows
NumPy's error model too (a division by zero gives inf or NaN, never an exception),
and maximum/minimum/relu pick between equal values as NumPy does (the second
operand), which decides the sign of a zero.

Instruction rows are ``(code, dst, a, b, c)``; ``arrays`` is a tuple of flat input
and output buffers. A broadcast or strided input is read row by row: ``idx`` holds
the storage offset of each row of ``c`` elements, which are contiguous (``ROWS``) or
all one value (``REPEAT``, a broadcast last dim).
"""

import numba
import numpy as np

LOAD, ROWS, CONST, STORE, REPEAT = 0, 1, 2, 3, 4
NEG, ABS, SQR, SQRT, RECIP, RELU = 10, 11, 12, 13, 14, 15
ADD, SUB, MUL, DIV, MAX, MIN = 20, 21, 22, 23, 24, 25
AS_FLOAT = 16
EQ, NE, LT, LE, GT, GE = 30, 31, 32, 33, 34, 35


@numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def run_program(prog, arrays, idx, consts, regs, n):
    """Run instruction list ``prog`` over elements ``0..n`` in blocks of ``regs.shape[1]``."""
    block = regs.shape[1]
    one = consts[0] * 0 + 1
    zero = consts[0] * 0
    for b0 in range(0, n, block):
        m = min(block, n - b0)
        for k in range(prog.shape[0]):
            code = prog[k, 0]
            rd = regs[prog[k, 1]]
            a = prog[k, 2]
            b = prog[k, 3]
            if code == ADD:
                ra = regs[a]
                rb = regs[b]
                for j in range(m):
                    rd[j] = ra[j] + rb[j]
            elif code == SUB:
                ra = regs[a]
                rb = regs[b]
                for j in range(m):
                    rd[j] = ra[j] - rb[j]
            elif code == MUL:
                ra = regs[a]
                rb = regs[b]
                for j in range(m):
                    rd[j] = ra[j] * rb[j]
            elif code == DIV:
                ra = regs[a]
                rb = regs[b]
                for j in range(m):
                    rd[j] = ra[j] / rb[j]
            elif code == MAX:
                # NumPy's maximum: a NaN on either side wins; of equal values
                # (-0 and +0) the second.
                ra = regs[a]
                rb = regs[b]
                for j in range(m):
                    x = ra[j]
                    y = rb[j]
                    rd[j] = x if (x > y or x != x) else y
            elif code == MIN:
                ra = regs[a]
                rb = regs[b]
                for j in range(m):
                    x = ra[j]
                    y = rb[j]
                    rd[j] = x if (x < y or x != x) else y
            elif code >= EQ:
                # A comparison's mask as 1.0 / 0.0 (NumPy's bool cast back to float).
                ra = regs[a]
                rb = regs[b]
                if code == GT:
                    for j in range(m):
                        rd[j] = one if ra[j] > rb[j] else zero
                elif code == GE:
                    for j in range(m):
                        rd[j] = one if ra[j] >= rb[j] else zero
                elif code == LT:
                    for j in range(m):
                        rd[j] = one if ra[j] < rb[j] else zero
                elif code == LE:
                    for j in range(m):
                        rd[j] = one if ra[j] <= rb[j] else zero
                elif code == EQ:
                    for j in range(m):
                        rd[j] = one if ra[j] == rb[j] else zero
                else:
                    for j in range(m):
                        rd[j] = one if ra[j] != rb[j] else zero
            elif code == AS_FLOAT:
                ra = regs[a]
                for j in range(m):
                    rd[j] = ra[j]
            elif code == LOAD:
                # Slices first: indices provably >= 0 let the loops vectorise.
                src = arrays[a][b + b0:b + b0 + m]
                for j in range(m):
                    rd[j] = src[j]
            elif code == ROWS or code == REPEAT:
                src = arrays[a]
                width = prog[k, 4]
                e = b0
                while e < b0 + m:
                    row = e // width
                    col = e - row * width
                    run = min(width - col, b0 + m - e)
                    base = idx[b + row]
                    out = rd[e - b0:e - b0 + run]
                    if code == ROWS:
                        part = src[base + col:base + col + run]
                        for j in range(run):
                            out[j] = part[j]
                    else:
                        v = src[base]
                        for j in range(run):
                            out[j] = v
                    e += run
            elif code == CONST:
                v = consts[a]
                for j in range(m):
                    rd[j] = v
            elif code == STORE:
                dst = arrays[b][prog[k, 4] + b0:prog[k, 4] + b0 + m]
                ra = regs[a]
                for j in range(m):
                    dst[j] = ra[j]
            elif code == NEG:
                ra = regs[a]
                for j in range(m):
                    rd[j] = -ra[j]
            elif code == ABS:
                ra = regs[a]
                for j in range(m):
                    rd[j] = abs(ra[j])
            elif code == SQR:
                ra = regs[a]
                for j in range(m):
                    rd[j] = ra[j] * ra[j]
            elif code == SQRT:
                ra = regs[a]
                for j in range(m):
                    rd[j] = np.sqrt(ra[j])
            elif code == RECIP:
                ra = regs[a]
                for j in range(m):
                    rd[j] = one / ra[j]
            elif code == RELU:
                ra = regs[a]
                for j in range(m):
                    x = ra[j]
                    # np.maximum(x, 0): NaN stays NaN, -0 gives +0.
                    rd[j] = x if (x > zero or x != x) else zero
