"""The op table (tallow/op.py) is the one list of element-wise ops: everything
derived from it agrees with it, and every differentiable op has a backprop rule."""

import ast
import pathlib
import re

import tallow as tl
from tallow import backprop
from tallow.backends import base
from tallow.backends.cpu import elementwise as cpu_elementwise
from tallow.op import BINARY_OPS, CMP_OPS, INT_UNARY_OPS, OPS, UNARY_OPS, gpu_codes, wgsl_constants
from support.source_tree import parse_file

SRC = pathlib.Path(tl.__file__).parent
WGSL = SRC / "backends" / "gpu" / "wgsl"


def _recorded_literal_names():
    """Op names recorded with a literal string: ``record1("x", ...)``, ``Op("x", ...)``..."""
    names = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(parse_file(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("Op", "record", "record1", "record2") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names.add(node.args[0].value)
    return names


def test_every_differentiable_op_has_a_backprop_rule_and_no_other_does():
    for d in OPS.values():
        assert (d.name in backprop.RULES) == d.differentiable, d
    # a binary op with a scalar operand is recorded as scalar_<op>
    for name in BINARY_OPS:
        assert f"scalar_{name}" in backprop.RULES, name


def test_every_op_recorded_by_name_has_a_rule():
    recorded = _recorded_literal_names()
    assert {"matmul", "reshape", "affine", "conv2d"} <= recorded  # the scan finds them
    assert not recorded - set(backprop.RULES), recorded - set(backprop.RULES)


def test_protocol_lists_and_tensor_methods_come_from_the_table():
    assert base.UNARY_OPS == UNARY_OPS and base.BINARY_OPS == BINARY_OPS and base.CMP_OPS == CMP_OPS
    assert not hasattr(base, "REDUCE_OPS")
    assert set(INT_UNARY_OPS) == {"neg", "abs", "sqr", "relu", "sign"}
    for name in UNARY_OPS:
        assert callable(getattr(tl.Tensor, name)), name
    x = tl.Tensor([0.5, -2.0])
    assert x.sqr().tolist() == [0.25, 4.0]


def test_cpu_kernels_cover_exactly_the_table():
    assert set(cpu_elementwise._FLOAT_UNARY) == set(UNARY_OPS)
    assert set(cpu_elementwise._INT_UNARY) == set(INT_UNARY_OPS)
    # %, // and the bitwise ops have their own tables (docs/semantics.md).
    assert (set(cpu_elementwise._BINARY_NATIVE) | {"div", "pow"} | set(cpu_elementwise._BITWISE)
            | set(cpu_elementwise._FLOORED)) == set(BINARY_OPS)
    assert set(cpu_elementwise._CMP) == set(CMP_OPS)


def test_gpu_codes_are_unique_per_kernel_and_every_wgsl_case_is_a_table_constant():
    for family in ("unary", "binary", "cmp"):
        codes = gpu_codes(family)
        assert len(set(codes.values())) == len(codes), family
    consts = dict(re.findall(r"const (OP_\w+): u32 = (\d+)u;", wgsl_constants()))
    assert consts["OP_NEG"] == "0" and consts["OP_CLAMP"] == "23" and consts["OP_GE"] == "5"
    for fname, family in (("unary.wgsl", ("unary", "unary_param")), ("binary.wgsl", ("binary",)),
                          ("cmp.wgsl", ("cmp",))):
        text = (WGSL / fname).read_text()
        assert not re.search(r"case \d+u", text), f"{fname}: a bare case number"
        cases = set(re.findall(r"case (OP_\w+)", text))
        expected = {f"OP_{d.name.upper()}" for d in OPS.values() if d.family in family}
        assert cases == expected, (fname, cases ^ expected)
