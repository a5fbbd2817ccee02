"""``einsum``: Einstein summation as a chain of batched matrix products.

The operands are contracted left to right, two at a time. For each pair, every index
is one of: kept in both (a batch dim), only on the left, only on the right, or shared
and summed (contracted). Each operand is permuted to (batch, own, contracted) and
reshaped to 3-D, so one ``matmul`` does the pair; indices that appear in one operand
only and not in the output are summed first. Every step is a differentiable op, so
gradients and the GPU come with it.
"""

from __future__ import annotations

import string

from .errors import InvalidArgumentError, ShapeMismatchError


def _parse(equation: str, operands):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise InvalidArgumentError(
            f"einsum: the equation {equation!r} names {len(inputs)} operands, got {len(operands)}")
    used = set(eq) - set(".,->")
    spare = iter(c for c in string.ascii_letters if c not in used)
    ell = None
    ell_rank = max((op.rank - (len(term) - 3) for term, op in zip(inputs, operands)
                    if "..." in term), default=0)
    if ell_rank:
        ell = "".join(next(spare) for _ in range(ell_rank))
    terms = []
    for term, op in zip(inputs, operands):
        if "..." in term:
            own = op.rank - (len(term) - 3)
            term = term.replace("...", ell[ell_rank - own:] if own else "")
        if len(term) != op.rank:
            raise ShapeMismatchError(
                f"einsum: term {term!r} has {len(term)} indices for an operand of shape {op.shape}")
        terms.append(term)
    if arrow:
        out = rhs.replace("...", ell or "")
    else:
        counts = {}
        for term in terms:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = (ell or "") + "".join(sorted(c for c, n in counts.items()
                                           if n == 1 and (ell is None or c not in ell)))
    return terms, out


def _take_diagonals(term: str, x):
    """An index repeated in one term (``ii``) takes that diagonal."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i, j = term.index(c), term.index(c, term.index(c) + 1)
        x = x.diagonal(0, i, j)
        term = "".join(t for k, t in enumerate(term) if k not in (i, j)) + c
    return term, x


def _sum_out(term: str, x, keep: set):
    """Sum the indices of ``term`` that no later operand or the output needs."""
    dims = [i for i, c in enumerate(term) if c not in keep]
    if not dims:
        return term, x
    x = x.sum(tuple(dims))
    return "".join(c for i, c in enumerate(term) if i not in dims), x


def _contract(ta: str, a, tb: str, b, keep: set):
    sizes = {c: n for t, x in ((ta, a), (tb, b)) for c, n in zip(t, x.shape)}
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]

    def size(cs):
        n = 1
        for c in cs:
            n *= sizes[c]
        return n

    # broadcast dims of size 1 against the other operand's size
    for c in batch + summed:
        na, nb = a.shape[ta.index(c)], b.shape[tb.index(c)]
        if na != nb:
            if na == 1:
                a = a.broadcast_as(tuple(nb if t == c else n for t, n in zip(ta, a.shape)))
            elif nb == 1:
                b = b.broadcast_as(tuple(na if t == c else n for t, n in zip(tb, b.shape)))
            else:
                raise ShapeMismatchError(f"einsum: index {c!r} has sizes {na} and {nb}")
            sizes[c] = max(na, nb)
    a3 = a.permute(tuple(ta.index(c) for c in batch + left + summed)).reshape(
        (size(batch), size(left), size(summed)))
    b3 = b.permute(tuple(tb.index(c) for c in batch + summed + right)).reshape(
        (size(batch), size(summed), size(right)))
    out = a3.matmul(b3).reshape(tuple(sizes[c] for c in batch + left + right))
    return "".join(batch + left + right), out


def einsum(equation: str, *operands):
    """PyTorch's ``einsum``: ``einsum("bij,bjk->bik", a, b)``; ``...`` broadcasts, an
    index repeated in one term takes a diagonal, and without ``->`` the output is the
    indices seen once, sorted. The operands may also come as one list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise InvalidArgumentError("einsum: needs at least one operand")
    terms, out = _parse(equation, operands)
    pairs = [_take_diagonals(t, x) for t, x in zip(terms, operands)]
    term, x = pairs[0]
    for k in range(1, len(pairs)):
        after = set(out).union(*(t for t, _ in pairs[k + 1:]))
        term, x = _sum_out(term, x, after.union(pairs[k][0]))
        tb, b = _sum_out(*pairs[k], after.union(term))
        term, x = _contract(term, x, tb, b, after)
    term, x = _sum_out(term, x, set(out))
    if sorted(term) != sorted(out):
        raise InvalidArgumentError(f"einsum: output indices {out!r} are not among the inputs'")
    if term != out:
        x = x.permute(tuple(term.index(c) for c in out))
    return x
