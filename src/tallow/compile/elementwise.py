"""Which recorded calls are fusable element-wise ops, and where the runs of them are.

Shared by the CPU and GPU fusion: a *group* is a run of consecutive live calls that
are element-wise ops of one float dtype over one shape on one backend, whose fused
form computes exactly what the eager kernels compute: add, sub, mul, div, maximum,
minimum (and their scalar forms), neg, abs, sqr, sqrt, recip, relu, affine, clamp.
A value made inside the group may be read by a later member only whole and
contiguous (as made); anything else ends the group.
"""

from __future__ import annotations

from .recorder import Ref

UNARY = {"neg": 10, "abs": 11, "sqr": 12, "sqrt": 13, "recip": 14, "relu": 15}
BINARY = {"add": 20, "sub": 21, "mul": 22, "div": 23, "maximum": 24, "minimum": 25}
MIN_OPS = 2  # a single op runs faster as its own kernel
# Comparisons give a bool mask; inside a group it is a register of 1.0 / 0.0 that only
# a cast back to the group's dtype may read (``relu``'s backward: gt, to_dtype, mul).
CMP = {"eq": 30, "ne": 31, "lt": 32, "le": 33, "gt": 34, "ge": 35}
AS_FLOAT = 16  # the cast of such a mask: the register as it is
MASK_DTYPES = ("bool", "u8")  # a comparison's result, or a mask cast to u8


def element_op(call, slots, backend, dtypes, masks=False):
    """``(shape, dtype, ops)`` when ``call`` can join a fused group, else None. ``ops``
    is a list of ``(code, operands)``; an operand is ``(slot, layout)`` or ``("const", v)``;
    the last op's value is the call's result. ``masks``: comparisons and the casts of
    their masks count too (their result slot is bool)."""
    if call.owner != "storage" or not isinstance(call.out, int) or call.kwargs:
        return None
    recv = slots[call.recv.slot]
    name, a = call.name, call.args
    if masks and name == "to_dtype" and recv.cls_name == backend and recv.dtype.name in MASK_DTYPES \
            and a[1] in dtypes:
        return a[0].shape, a[1], [(AS_FLOAT, [(recv.slot_no, a[0])])]
    if recv.cls_name != backend or recv.dtype not in dtypes:
        return None
    this = recv.slot_no
    cast = recv.dtype.np.type
    if name == "unary" and a[0] in UNARY:
        return a[1].shape, recv.dtype, [(UNARY[a[0]], [(this, a[1])])]
    if name == "binary" and a[0] in BINARY and isinstance(a[2], Ref):
        other = slots[a[2].slot]
        if other.dtype is not recv.dtype or other.cls_name != recv.cls_name:
            return None
        return a[1].shape, recv.dtype, [(BINARY[a[0]], [(this, a[1]), (a[2].slot, a[3])])]
    if masks and name == "cmp_scalar" and a[0] in CMP:
        return a[1].shape, recv.dtype, [(CMP[a[0]], [(this, a[1]), ("const", cast(a[2]))])]
    if masks and name == "cmp" and a[0] in CMP and isinstance(a[2], Ref):
        other = slots[a[2].slot]
        if other.dtype is not recv.dtype or other.cls_name != recv.cls_name:
            return None
        return a[1].shape, recv.dtype, [(CMP[a[0]], [(this, a[1]), (a[2].slot, a[3])])]
    if name == "binary_scalar" and a[0] in BINARY:
        x, c = (this, a[1]), ("const", cast(a[2]))
        return a[1].shape, recv.dtype, [(BINARY[a[0]], [c, x] if a[3] else [x, c])]
    if name == "affine":
        # y = x * mul; y += add: two roundings, as the eager kernel.
        ops = [(BINARY["mul"], [(this, a[0]), ("const", cast(a[1]))]),
               (BINARY["add"], ["prev", ("const", cast(a[2]))])]
        return a[0].shape, recv.dtype, ops
    if name == "clamp":
        ops, first = [], (this, a[0])
        if a[1] is not None:
            ops.append((BINARY["maximum"], [first, ("const", cast(a[1]))]))
            first = "prev"
        if a[2] is not None:
            ops.append((BINARY["minimum"], [first, ("const", cast(a[2]))]))
        if not ops:
            return None
        return a[0].shape, recv.dtype, ops
    return None


def find_groups(calls, slots, live, backend, dtypes, masks=False):
    """Runs of fusable consecutive live calls on storages of class ``backend`` with a
    dtype in ``dtypes`` (dead calls are left out): a list of ``(members, shape, dtype)``
    with at least ``MIN_OPS`` element-wise ops."""
    groups = []
    cur = None  # [members, None, shape, dtype, produced slots, op count]

    def close():
        if cur is not None and cur[5] >= MIN_OPS:
            groups.append((cur[0], cur[2], cur[3]))

    for i, call in enumerate(calls):
        if not live[i]:
            continue
        info = element_op(call, slots, backend, dtypes, masks)
        if info is not None and info[2][0][0] == AS_FLOAT and (cur is None or call.recv.slot not in cur[4]):
            info = None  # a mask from outside the group: data the kernel does not read
        if info is None:
            close()
            cur = None
            continue
        shape, dtype, ops = info
        ok = cur is not None and cur[2] == shape and cur[3] is dtype
        if ok:
            for _code, operands in ops:
                for o in operands:
                    if isinstance(o, tuple) and o[0] != "const" and o[0] in cur[4]:
                        lay = o[1]
                        if not (lay.contiguous and lay.start_offset == 0):
                            ok = False
        if not ok:
            close()
            cur = [[], None, shape, dtype, set(), 0]
        cur[0].append(i)
        cur[4].add(call.out)
        cur[5] += len(ops)
    close()
    return groups


