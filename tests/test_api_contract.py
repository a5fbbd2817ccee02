"""The contract (API.md) walked name by name: every documented name exists, its
signature takes the documented parameters with the documented defaults, and the
behaviours the contract spells out (and docs/api.md adds) hold.

A documented name that disappears, a renamed parameter or a changed default fails
here. Parameters the contract names only loosely (``k``, ``seq_or_array``) are
checked by position (``_``); tallow may add trailing parameters with defaults, and may
give a default to one the contract lists as required (a superset).
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

import tallow as tl

REQ = inspect.Parameter.empty


def _resolve(path: str):
    obj = tl
    for part in path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not inspect.ismodule(obj):
                raise
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


# -- every name ----------------------------------------------------------------------

NAMES = """
u8 u32 i64 f16 bf16 f32 f64 DType DType.parse
Device Device.cpu cpu Device.gpu Device.parse Device.supports_dtype Device.id
Device.synchronize Device.set_seed Device.same_device Device.info Device.memory_stats
Device.set_cache_limit Device.kernel_stats
utils.gpu_is_available utils.cuda_is_available utils.get_num_threads utils.set_num_threads
Tensor tensor Tensor.new Tensor.from_slice Tensor.from_vec from_numpy from_dlpack
zeros ones full zeros_like ones_like full_like eye arange linspace rand randn rand_like
randn_like cat stack
Tensor.shape Tensor.dims Tensor.stride Tensor.rank Tensor.nelement Tensor.elem_count
Tensor.dtype Tensor.device Tensor.layout Tensor.id Layout Layout.is_contiguous
Layout.is_fortran_contiguous Tensor.is_contiguous Tensor.storage_and_layout
Tensor.values Tensor.to_scalar Tensor.to_vec0 Tensor.to_vec1 Tensor.to_vec2 Tensor.to_vec3
Tensor.numpy Tensor.__array__ Tensor.__dlpack__ Tensor.to_torch
Tensor.reshape Tensor.t Tensor.transpose Tensor.permute Tensor.narrow Tensor.squeeze
Tensor.unsqueeze Tensor.broadcast_as Tensor.broadcast_left Tensor.expand Tensor.flatten_all
Tensor.flatten_from Tensor.flatten_to Tensor.flatten Tensor.chunk Tensor.split
Tensor.contiguous Tensor.force_contiguous Tensor.copy Tensor.detach Tensor.clone
Tensor.to_dtype Tensor.to_device Tensor.to Tensor.i Tensor.__getitem__ D D.Minus1 D.Minus2
Tensor.neg Tensor.abs Tensor.exp Tensor.log Tensor.sin Tensor.cos Tensor.tanh Tensor.sqr
Tensor.sqrt Tensor.recip Tensor.relu Tensor.gelu Tensor.gelu_erf Tensor.erf Tensor.silu
Tensor.sigmoid Tensor.floor Tensor.ceil Tensor.round Tensor.sign Tensor.powf Tensor.affine
Tensor.clamp Tensor.elu
Tensor.add Tensor.sub Tensor.mul Tensor.div Tensor.maximum Tensor.minimum Tensor.pow
Tensor.broadcast_add Tensor.broadcast_sub Tensor.broadcast_mul Tensor.broadcast_div
Tensor.broadcast_maximum Tensor.broadcast_minimum Tensor.broadcast_pow
Tensor.__add__ Tensor.__radd__ Tensor.__sub__ Tensor.__rsub__ Tensor.__mul__ Tensor.__rmul__
Tensor.__truediv__ Tensor.__rtruediv__ Tensor.__pow__ Tensor.__rpow__ Tensor.__matmul__
Tensor.__rmatmul__ Tensor.__neg__
Tensor.eq Tensor.ne Tensor.lt Tensor.le Tensor.gt Tensor.ge Tensor.where_cond
Tensor.sum_keepdim Tensor.sum Tensor.mean_keepdim Tensor.mean Tensor.max_keepdim Tensor.max
Tensor.min_keepdim Tensor.min Tensor.argmax_keepdim Tensor.argmax Tensor.argmin_keepdim
Tensor.argmin Tensor.sum_all Tensor.mean_all Tensor.max_all Tensor.min_all
Tensor.var_keepdim Tensor.cumsum Tensor.matmul Tensor.broadcast_matmul Tensor.index_select
Tensor.gather Tensor.scatter_add Tensor.index_add Tensor.embedding Tensor.arg_sort_last_dim
Tensor.sort_last_dim Tensor.pad_with_zeros Tensor.pad_with_same Tensor.flip Tensor.roll
Tensor.repeat Tensor.round_to Tensor.log_sum_exp Tensor.norm Tensor.dot Tensor.mv
Tensor.scatter Tensor.scatter_set Tensor.slice_assign Tensor.slice_scatter0 Tensor.conv1d
Tensor.conv2d Tensor.conv_transpose1d Tensor.conv_transpose2d Tensor.interpolate1d
Tensor.interpolate2d Tensor.upsample_nearest1d Tensor.upsample_nearest2d Tensor.avg_pool2d
Tensor.max_pool2d Tensor.tril2 Tensor.triu2 Tensor.meshgrid Tensor.dims1 Tensor.dims2
Tensor.dims3 Tensor.dims4 Tensor.dims5 Tensor.slice_set Tensor.zero_set Tensor.one_set
Tensor.const_set
Var Var.from_tensor Var.as_tensor Var.set Tensor.is_variable Tensor.track_op
Tensor.sorted_nodes Tensor.backward GradStore GradStore.get GradStore.get_id
GradStore.__getitem__ GradStore.__contains__ GradStore.remove GradStore.insert
CustomOp1 CustomOp2 CustomOp3 InplaceOp1 InplaceOp2 Tensor.apply_op1 Tensor.apply_op2
Tensor.apply_op3 Tensor.inplace_op1 Tensor.inplace_op2
quantized QTensor quantized.QTensor Tensor.quantize QTensor.dequantize QTensor.matmul_t
QTensor.to_bytes QTensor.from_bytes quantized.QMatMul quantized.QMatMul.from_qtensor
quantized.QMatMul.forward utils.load_gguf utils.save_gguf
utils.load_safetensors utils.save_safetensors utils.load_npy utils.load_npz utils.save_npy
nn.Module nn.Module.named_modules nn.Module.named_buffers nn.Module.buffers
nn.Module.state_dict nn.Module.load_state_dict nn.Module.cpu nn.Module.gpu nn.Module.to
nn.Linear nn.Embedding nn.LayerNorm nn.RmsNorm nn.Sequential nn.ModuleList nn.VarBuilder
nn.VarBuilder.from_safetensors nn.VarBuilder.pp nn.VarBuilder.get nn.VarMap
nn.ops.softmax nn.ops.softmax_last_dim nn.ops.log_softmax nn.ops.silu nn.ops.sigmoid
nn.ops.rms_norm nn.ops.layer_norm nn.rotary_emb.rope nn.rotary_emb.rope_i
nn.loss.cross_entropy nn.loss.nll nn.loss.mse nn.loss.binary_cross_entropy_with_logit
nn.optim.SGD nn.optim.AdamW nn.optim.SGD.step nn.optim.SGD.backward_step
nn.optim.AdamW.step nn.optim.AdamW.backward_step
testing.assert_equal testing.assert_almost_equal
TallowError ShapeMismatchError DTypeMismatchError DeviceMismatchError UnsupportedDTypeError
DimOutOfRangeError NarrowOutOfBoundsError
models.bert.BertConfig.from_json models.bert.BertModel.load models.bert.BertModel.forward
models.SentenceEmbedder.from_pretrained models.SentenceEmbedder.encode
models.llama.LlamaConfig.from_json models.llama.Llama.load models.llama.Llama.forward
models.llama.Cache models.quantized_llama.ModelWeights.from_gguf
models.generate.TextGenerator
""".split()

# docs/api.md's additions (it must not drop or rename the contract's names either).
DOC_NAMES = """
Tensor.item Tensor.tolist Tensor.op Tensor.T Tensor.squeeze_dims Tensor.broadcast_to
Tensor.var Tensor.slice_scatter Tensor.get Tensor.cpu Tensor.gpu
IndexOutOfRangeError NotDifferentiableError FileFormatError
utils.num_threads_rule utils.SafetensorsFile utils.save_npz utils.parse_absolute_shape
utils.has_mkl utils.has_accelerate GradStore.get_ids GradStore.items Var.as_detached_tensor
quantized.load_gguf quantized.read_gguf quantized.GgufFile quantized.GgufValue
quantized.GgufError nn.linear nn.MissingTensorError nn.Init nn.ops.gelu nn.ops.gelu_erf
nn.ops.relu nn.ops.leaky_relu nn.ops.swiglu nn.ops.dropout nn.ops.activation
nn.ops.scaled_dot_product_attention nn.ops.repeat_kv nn.rotary_emb.rope_thd
nn.rotary_emb.rope_tables models.ModelFormatError models.ContextLengthError
models.generate.LogitsProcessor models.generate.apply_repeat_penalty
models.generate.TokenOutputStream models.llama.Llama.logits models.llama.Llama.new_cache
""".split()


@pytest.mark.parametrize("path", NAMES + DOC_NAMES)
def test_documented_name_exists(path):
    _resolve(path)


@pytest.mark.parametrize("path", "shape dims stride rank nelement elem_count dtype device "
                                 "layout id".split())
def test_inspecting_names_are_properties(path):
    assert isinstance(inspect.getattr_static(tl.Tensor, path), property)


# -- signatures ----------------------------------------------------------------------
# "name" (required), ("name", default), "*name" (varargs); "_" matches any name.

cpu, f32 = tl.cpu, tl.f32
SIGNATURES = {
    "tensor": ["data", ("dtype", None), ("device", None)],
    "Tensor.new": ["data", ("device", cpu)],
    "Tensor.from_slice": ["_", "shape", "device"],
    "Tensor.from_vec": ["_", "shape", "device"],
    "zeros": ["*shape", ("dtype", f32), ("device", cpu)],
    "ones": ["*shape", ("dtype", f32), ("device", cpu)],
    "full": ["shape", "value", ("dtype", None), ("device", cpu)],
    "zeros_like": ["t"], "ones_like": ["t"], "eye": ["n"],
    "arange": ["start", "end", ("step", 1), ("dtype", None), ("device", cpu)],
    "rand": ["*shape", ("low", 0.0), ("high", 1.0)],
    "randn": ["*shape", ("mean", 0.0), ("std", 1.0), ("dtype", f32), ("device", cpu)],
    "cat": ["tensors", "dim"], "stack": ["tensors", "dim"],
    "Device.gpu": [("ordinal", 0)], "Device.parse": ["_"],
    "Device.supports_dtype": ["self", "dtype"], "Device.same_device": ["self", "other"],
    "Device.set_seed": ["self", "_"], "Device.set_cache_limit": ["self", "_"],
    "utils.set_num_threads": ["n"],
    "Tensor.reshape": ["self", "*shape"], "Tensor.transpose": ["self", "_", "_"],
    "Tensor.narrow": ["self", "dim", "start", "_"], "Tensor.squeeze": ["self", "dim"],
    "Tensor.unsqueeze": ["self", "dim"], "Tensor.chunk": ["self", "_", "dim"],
    "Tensor.split": ["self", "_", "dim"], "Tensor.to_dtype": ["self", "dtype"],
    "Tensor.to_device": ["self", "device"], "Tensor.i": ["self", "index"],
    "Tensor.affine": ["self", "mul", "add"], "Tensor.elu": ["self", "alpha"],
    "Tensor.where_cond": ["self", "on_true", "on_false"],
    "Tensor.sum_keepdim": ["self", "dims"], "Tensor.sum": ["self", "dims"],
    "Tensor.cumsum": ["self", "dim"],
    "Tensor.index_select": ["self", "ids", "dim"], "Tensor.gather": ["self", "ids", "dim"],
    "Tensor.scatter_add": ["self", "ids", "src", "dim"],
    "Tensor.index_add": ["self", "ids", "src", "dim"], "Tensor.embedding": ["self", "ids"],
    "Tensor.arg_sort_last_dim": ["self", ("asc", True)],
    "Tensor.sort_last_dim": ["self", ("asc", True)],
    "Tensor.pad_with_zeros": ["self", "dim", "left", "right"],
    "Tensor.pad_with_same": ["self", "dim", "left", "right"],
    "Tensor.flip": ["self", "dims"], "Tensor.roll": ["self", "shift", "dim"],
    "Tensor.round_to": ["self", "decimals"], "Tensor.log_sum_exp": ["self", "dims"],
    "Tensor.dot": ["self", "rhs"], "Tensor.mv": ["self", "vec"],
    "Tensor.scatter": ["self", "ids", "src", "dim"],
    "Tensor.scatter_set": ["self", "ids", "src", "dim"],
    "Tensor.slice_assign": ["self", "ranges", "src"],
    "Tensor.slice_scatter0": ["self", "src", "start"],
    "Tensor.conv1d": ["self", "kernel", ("padding", 0), ("stride", 1), ("dilation", 1), ("groups", 1)],
    "Tensor.conv2d": ["self", "kernel", ("padding", 0), ("stride", 1), ("dilation", 1), ("groups", 1)],
    "Tensor.conv_transpose1d": ["self", "kernel", "padding", "output_padding", "stride",
                                "dilation", "groups"],
    "Tensor.conv_transpose2d": ["self", "kernel", "padding", "output_padding", "stride",
                                "dilation", "groups"],
    "Tensor.interpolate1d": ["self", "size"], "Tensor.interpolate2d": ["self", "h", "w"],
    "Tensor.upsample_nearest1d": ["self", "size"],
    "Tensor.upsample_nearest2d": ["self", "h", "w"],
    "Tensor.avg_pool2d": ["self", "_", "stride"], "Tensor.max_pool2d": ["self", "_", "stride"],
    "Tensor.tril2": ["n", "dtype", "device"], "Tensor.triu2": ["n", "dtype", "device"],
    "Tensor.meshgrid": ["tensors", "xy_indexing"],
    "Tensor.slice_set": ["self", "src", "dim", "offset"],
    "Tensor.apply_op1": ["self", "op"], "Tensor.apply_op2": ["self", "rhs", "op"],
    "Tensor.apply_op3": ["self", "b", "c", "op"], "Tensor.inplace_op1": ["self", "op"],
    "Tensor.inplace_op2": ["self", "rhs", "op"],
    "Var.from_tensor": ["t"], "Var.set": ["self", "_"],
    "GradStore.get": ["self", "_"], "GradStore.get_id": ["self", "_"],
    "GradStore.remove": ["self", "_"], "GradStore.insert": ["self", "_", "_"],
    "QTensor.from_bytes": ["data", "shape", "ggml_dtype", ("device", cpu)],
    "QTensor.matmul_t": ["self", "lhs"],
    "utils.load_gguf": ["path"], "utils.save_gguf": ["path", "tensors", "metadata"],
    "utils.load_safetensors": ["path", ("device", cpu)],
    "utils.save_safetensors": ["path", "tensors"],
    "nn.Linear": ["_", "_", ("bias", True)],
    "nn.VarBuilder.from_safetensors": ["paths", "dtype", "device"],
    "nn.VarBuilder.pp": ["self", "prefix"], "nn.VarBuilder.get": ["self", "shape", "name"],
    "nn.ops.softmax": ["_", "dim"],
    "testing.assert_equal": ["_", "_"],
    "testing.assert_almost_equal": ["_", "_", ("rtol", 1e-5), ("atol", 1e-8)],
    "models.bert.BertConfig.from_json": ["path"],
    "models.bert.BertModel.load": ["vb", "config"],
    "models.bert.BertModel.forward": ["self", "input_ids", "token_type_ids",
                                      ("attention_mask", None)],
    "models.SentenceEmbedder.from_pretrained": ["model_dir", ("device", cpu), ("dtype", f32)],
    "models.SentenceEmbedder.encode": ["self", "sentences", ("batch_size", 32),
                                       ("normalize", None)],
    "models.llama.LlamaConfig.from_json": ["path"],
    "models.llama.Llama.load": ["vb", "config"],
    "models.llama.Llama.forward": ["self", "input_ids", "index_pos", "cache"],
    "models.llama.Cache": ["config", "dtype", "device"],
    "models.quantized_llama.ModelWeights.from_gguf": ["path", "device"],
    "models.generate.TextGenerator": ["model", "tokenizer", "temperature", "top_p", "top_k",
                                      "seed", "repeat_penalty"],
}


def _check_signature(path, spec):
    params = list(inspect.signature(_resolve(path)).parameters.values())
    assert len(params) >= len(spec), f"{path}: {params} has fewer parameters than {spec}"
    for p, want in zip(params, spec):
        name, default = (want, REQ) if isinstance(want, str) else want
        if name.startswith("*"):
            assert p.kind is p.VAR_POSITIONAL and p.name == name[1:], f"{path}: {p} is not {want}"
            continue
        assert p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY, p.KEYWORD_ONLY), (path, p)
        if name != "_":
            assert p.name == name, f"{path}: parameter {p.name!r}, the contract says {name!r}"
        if default is not REQ:
            assert p.default is not REQ and p.default == default and \
                type(p.default) is type(default), f"{path}: {p.name}={p.default!r}, contract: {default!r}"
    for p in params[len(spec):]:  # additions must not make old calls fail
        assert p.default is not REQ or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD), (path, p)


# docs/api.md's signatures (its own claims, checked the same way).
DOC_SIGNATURES = {
    "Tensor.var_keepdim": ["self", "dim", ("unbiased", True)],
    "Tensor.split": ["self", "_", ("dim", 0)],
    "Tensor.slice_scatter": ["self", "src", "dim", "start"],
    "Tensor.gpu": ["self", ("ordinal", 0)],
    "Var": ["data", ("dtype", None), ("device", None)],
    "utils.parse_absolute_shape": ["*shape", ("element_count", None)],
    "utils.load_gguf": ["path", ("device", None)],
    "utils.SafetensorsFile.get": ["self", "name", ("device", None)],
    "quantized.QMatMul": ["_", ("dequantize", None)],
    "nn.Module.register_buffer": ["self", "name", "_", ("persistent", True)],
    "nn.Linear.from_weights": ["weight", ("bias", None)],
    "nn.Linear.load": ["vb", "_", "_", ("bias", True)],
    "nn.linear": ["x", "weight", "bias"],
    "nn.VarBuilder.from_safetensors": ["_", ("dtype", f32), ("device", cpu)],
    "nn.VarBuilder.get": ["self", "shape", "name", ("init", None), ("dtype", None)],
    "nn.VarMap.get": ["self", "shape", "name", "init"],
    "nn.ops.dropout": ["x", "p", "train"],
    "nn.ops.scaled_dot_product_attention": ["query", "key", "value", ("attn_mask", None),
                                            ("dropout_p", 0.0), ("is_causal", False),
                                            ("scale", None)],
    "nn.rotary_emb.rope_tables": ["head_dim", "max_positions", ("theta", 10000.0),
                                  ("dtype", "f32"), ("device", None)],
    "nn.optim.SGD": ["params", "lr", ("momentum", 0.0), ("weight_decay", 0.0),
                     ("dampening", 0.0), ("nesterov", False)],
    "nn.optim.AdamW": ["params", ("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.999),
                       ("eps", 1e-8), ("weight_decay", 0.01)],
    "models.quantized_llama.ModelWeights.from_gguf": ["path", ("device", cpu)],
    "models.quantized_llama.ModelWeights.forward": ["self", "input_ids", "index_pos",
                                                    ("cache", None)],
    "models.SentenceEmbedder.encode": ["self", "sentences", ("batch_size", 32),
                                       ("normalize", None), ("show_progress_bar", None),
                                       ("convert_to_numpy", True), ("workers", None)],
    "models.llama.Llama.new_cache": ["self", ("use_kv_cache", True)],
    "models.llama.Cache": ["config", "dtype", "device", "use_kv_cache"],
    "models.generate.TextGenerator": ["model", "tokenizer", ("temperature", 0.8),
                                      ("top_p", None), ("top_k", None), ("seed", 299792458),
                                      ("repeat_penalty", 1.0), ("repeat_last_n", 64),
                                      ("eos_token_ids", None)],
}


@pytest.mark.parametrize("path", sorted(SIGNATURES))
def test_signature(path):
    _check_signature(path, SIGNATURES[path])


@pytest.mark.parametrize("path", sorted(DOC_SIGNATURES))
def test_docs_signature(path):
    _check_signature(path, DOC_SIGNATURES[path])


def test_signature_check_can_fail():
    with pytest.raises(AssertionError):
        _check_signature("zeros", ["*shape", ("dtype", tl.f64)])
    with pytest.raises(AssertionError):
        _check_signature("full", ["shape", "fill"])


# -- behaviours the contract spells out ----------------------------------------------

def test_defaults_are_what_they_say(device):
    assert tl.zeros(2).dtype == tl.f32 and tl.zeros(2).device == tl.cpu
    assert tl.randn(2).dtype == tl.f32 and tl.rand(2).device == tl.cpu
    assert tl.Tensor.new([1.0]).device == tl.cpu
    assert tl.Tensor.new([1.0], device).device == device
    # Explicit None still means the default.
    assert tl.zeros(2, dtype=None, device=None).dtype == tl.f32


def test_constructors_take_the_documented_positional_arguments(device):
    # zeros(shape, dtype, device), randn(shape, mean, std, dtype, device), rand(shape, low, high)
    z = tl.zeros((2, 3), tl.f64, device)
    assert (z.shape, z.dtype, z.device) == ((2, 3), tl.f64, device)
    u = tl.rand((4000,), 2.0, 3.0)
    assert u.min_all().values() >= 2.0 and u.max_all().values() < 3.0
    n = tl.randn((4000,), 5.0, 0.5, tl.f64, device)
    assert (n.dtype, n.device) == (tl.f64, device)
    assert abs(n.mean_all().values() - 5.0) < 0.1
    assert tl.rand((2,), 0.0, 1.0, tl.f64).dtype == tl.f64
    with pytest.raises(TypeError):
        tl.rand((2,), 0.0, 1.0, tl.f32, tl.cpu, "extra")
    assert tl.rand(10, 20).shape == (10, 20)


@pytest.mark.parametrize("make", [
    lambda: tl.zeros((2, -1)), lambda: tl.ones(-1), lambda: tl.full((-2,), 1.0),
    lambda: tl.rand(-1), lambda: tl.randn((3, -1)), lambda: tl.eye(-1), lambda: tl.eye(2, -1),
    lambda: tl.Tensor.tril2(-1, tl.f32, tl.cpu), lambda: tl.Tensor.triu2(-1, tl.f32, tl.cpu),
    lambda: tl.linspace(0.0, 1.0, -1), lambda: tl.Tensor.from_slice([1.0], (-1,), tl.cpu),
], ids=["zeros", "ones", "full", "rand", "randn", "eye", "eye-m", "tril2", "triu2",
        "linspace", "from_slice"])
def test_negative_sizes_raise_overflow_error(make):
    with pytest.raises(OverflowError):
        make()


def test_reflected_matmul_takes_numpy_operands(device):
    t = tl.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    a = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    left, right = a @ t, t @ a
    assert isinstance(left, tl.Tensor) and left.device == device
    np.testing.assert_array_equal(left.numpy(), a @ t.numpy())
    np.testing.assert_array_equal(right.numpy(), t.numpy() @ a)
    np.testing.assert_array_equal((t @ [1.0, 1.0]).numpy(), [3.0, 7.0])
    with pytest.raises(tl.DTypeMismatchError):
        np.ones((2, 2)) @ t  # an f64 array: dtypes are not mixed silently
    with pytest.raises(TypeError):
        t @ 2.0


def test_slice_assign_takes_python_ranges(device):
    z = tl.zeros((3, 4), device=device)
    out = z.slice_assign([range(0, 2), range(1, 3)], tl.ones((2, 2), device=device))
    want = np.zeros((3, 4), np.float32)
    want[0:2, 1:3] = 1
    np.testing.assert_array_equal(out.numpy(), want)
    assert out.values() == z.slice_assign((slice(0, 2), slice(1, 3)),
                                          tl.ones((2, 2), device=device)).values()
    with pytest.raises(tl.ShapeMismatchError):
        z.slice_assign([range(0, 3, 2)], tl.ones((2, 4), device=device))
    with pytest.raises(tl.NarrowOutOfBoundsError):
        z.slice_assign([range(2, 5)], tl.ones((3, 4), device=device))


def test_device_info_has_the_documented_keys(device):
    info = device.info()
    for key in ("backend", "adapter", "features", "limits"):
        assert key in info, key
    if device.kind == "gpu":
        for key in ("ops_per_submit", "ops_encoded", "submits", "readbacks",
                    "bytes_uploaded", "bytes_read_back"):
            assert key in info, key
        stats = device.memory_stats()
        for key in ("active_bytes", "cached_bytes", "peak_bytes", "buffers_per_bucket"):
            assert key in stats, key
    else:
        with pytest.raises(tl.TallowError):
            device.memory_stats()


def test_dtype_inference_and_names():
    assert [str(d) for d in (tl.u8, tl.u32, tl.i64, tl.f16, tl.bf16, tl.f32, tl.f64)] == \
        ["u8", "u32", "i64", "f16", "bf16", "f32", "f64"]
    assert [d.size_in_bytes for d in (tl.u8, tl.u32, tl.i64, tl.f16, tl.bf16, tl.f32, tl.f64)] == \
        [1, 4, 8, 2, 2, 4, 8]
    assert tl.DType.parse("bf16") is tl.bf16
    assert tl.tensor([1, 2.5]).dtype == tl.f32
    # ints -> i64, as NumPy and PyTorch (candle-pyo3 picks u32; docs/semantics.md).
    assert tl.tensor([0, 2**32 - 1]).dtype == tl.i64
    assert tl.tensor([1, 2, 3]).dtype == tl.i64
    assert (tl.tensor([1, 2, 3]) - 5).values() == [-4, -3, -2]
    assert tl.float32 is tl.f32 and tl.float16 is tl.f16 and tl.bfloat16 is tl.bf16
    assert tl.float64 is tl.f64 and tl.int64 is tl.i64 and tl.uint8 is tl.u8
    assert tl.tensor([2**32]).dtype == tl.i64 and tl.tensor([-1]).dtype == tl.i64
    assert tl.tensor([True, False]).dtype == tl.bool
    assert tl.tensor(np.zeros(2)).dtype == tl.f64


def test_error_classes():
    for cls in (tl.ShapeMismatchError, tl.DTypeMismatchError, tl.DeviceMismatchError,
                tl.UnsupportedDTypeError, tl.DimOutOfRangeError, tl.NarrowOutOfBoundsError,
                tl.IndexOutOfRangeError, tl.NotDifferentiableError, tl.FileFormatError):
        assert issubclass(cls, tl.TallowError)
    assert issubclass(tl.ShapeMismatchError, ValueError)
    assert issubclass(tl.DimOutOfRangeError, IndexError)
    assert issubclass(tl.IndexOutOfRangeError, IndexError)
    assert issubclass(tl.models.ContextLengthError, ValueError)
    assert issubclass(tl.models.ContextLengthError, tl.models.ModelFormatError)


def test_dims_constants():
    assert (tl.D.Minus1, tl.D.Minus2) == (-1, -2)
    assert tl.ones((2, 3, 4)).sum(tl.D.Minus2).shape == (2, 4)
