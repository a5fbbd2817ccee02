"""candle-pyo3's example scripts ``test.py`` and ``test_pytorch.py``, run as tests.

They only print; here each printed expression is also checked for what candle
prints it from (shape, dtype), so a silent wrong answer fails too.
"""

import pytest

import tallow as candle


def test_example_test_py(capsys):
    t = candle.Tensor(42.0)
    print(t)
    print(t.shape, t.rank, t.device)
    assert (t.shape, t.rank, t.device) == ((), 0, "cpu")
    print(t + t)

    t = candle.Tensor([3.0, 1, 4, 1, 5, 9, 2, 6])
    print(t)
    print(t + t)

    t = t.reshape([2, 4])
    print(t.matmul(t.t()))
    assert t.matmul(t.t()).values() == [[27.0, 38.0], [38.0, 146.0]]

    print(t.to_dtype(candle.u8))
    print(t.to_dtype("u8"))
    assert t.to_dtype("u8").dtype == candle.u8

    t = candle.randn((5, 3))
    print(t)
    print(t.dtype)

    t = candle.randn((16, 256))
    quant_t = t.quantize("q6k")
    dequant_t = quant_t.dequantize()
    diff2 = (t - dequant_t).sqr()
    print(diff2.mean_all())
    assert diff2.mean_all().values() < 1e-2
    assert "42" in capsys.readouterr().out


def test_example_test_pytorch_py():
    torch = pytest.importorskip("torch")
    # convert from candle tensor to torch tensor
    t = candle.randn((3, 512, 512))
    torch_tensor = t.to_torch()
    print(torch_tensor)
    print(type(torch_tensor))
    assert isinstance(torch_tensor, torch.Tensor) and tuple(torch_tensor.shape) == (3, 512, 512)

    # convert from torch tensor to candle tensor
    t = torch.randn((3, 512, 512))
    candle_tensor = candle.Tensor(t)
    print(candle_tensor)
    print(type(candle_tensor))
    assert isinstance(candle_tensor, candle.Tensor) and candle_tensor.shape == (3, 512, 512)
    assert candle_tensor.values() == t.tolist()


def test_example_quant_llama_calls():
    """The calls candle-pyo3's ``quant-llama.py`` makes, on a tiny random model.

    The script itself needs a GGML/GGUF llama file; here each pattern it uses runs on
    small random tensors and is checked against NumPy.
    """
    np = pytest.importorskip("numpy")
    b, seq, hidden, n_head = 1, 3, 64, 2
    head_dim = hidden // n_head
    x = candle.randn((b, seq, hidden))
    xn = np.asarray(x.values(), dtype=np.float64)

    # RmsNorm: int scalar division, float scalar add, broadcast_div / broadcast_mul.
    weight = candle.randn((hidden,)).quantize("q8_0").dequantize()
    norm_x = x.sqr().sum_keepdim(2) / hidden
    normed = x.broadcast_div((norm_x + 1e-5).sqrt()).broadcast_mul(weight)
    ref = xn / np.sqrt((xn ** 2).sum(2, keepdims=True) / hidden + 1e-5) * np.asarray(weight.values())
    np.testing.assert_allclose(normed.values(), ref, rtol=1e-4, atol=1e-5)

    # QTensor.matmul_t on a 3-D activation: lhs @ W.T over the last dim.
    wq = candle.randn((hidden, hidden)).quantize("q4_0")
    q = wq.matmul_t(x)
    assert q.shape == (b, seq, hidden)
    ref = xn @ np.asarray(wq.dequantize().values(), dtype=np.float64).T
    # As in candle (and ggml) the activation is quantized to q8_0 for the dot products,
    # so the result is close to, not equal to, the dequantized matmul.
    assert np.abs(np.asarray(q.values()) - ref).max() < 0.03 * np.abs(ref).max()

    # Attention: reshape / transpose / t(), python-float division, an integer mask from
    # ints (i64 in tallow, u32 in candle-pyo3: docs/semantics.md, integers), masked_fill
    # as where_cond over a broadcast scalar tensor, candle.nn.softmax.
    q = q.reshape((b, seq, n_head, head_dim)).transpose(1, 2)
    att = q.matmul(q.t()) / head_dim**0.5
    mask = candle.tensor([int(j > i) for i in range(seq) for j in range(seq)]).reshape((seq, seq))
    assert mask.dtype == candle.i64
    mask = mask.broadcast_as(att.shape)
    att = mask.where_cond(candle.tensor(float("-inf")).broadcast_as(mask.shape), att)
    att = candle.nn.softmax(att, -1)
    probs = np.asarray(att.values())
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    assert (probs[..., 0, 1:] == 0).all()  # the first position sees only itself

    # Rotary embedding: narrow with a negative dim, cat on -1, flatten_from(-2).
    freqs = candle.tensor([1.0 / 10000.0 ** (i / head_dim) for i in range(0, head_dim, 2)])
    pos = candle.tensor([float(i) for i in range(seq)]).reshape((seq, 1))
    m = pos.matmul(freqs.unsqueeze(0))
    cos = m.cos().narrow(0, 0, seq).reshape((seq, head_dim // 2, 1))
    sin = m.sin().narrow(0, 0, seq).reshape((seq, head_dim // 2, 1))
    xr = q.reshape((b, n_head, seq, head_dim // 2, 2))
    x0, x1 = xr.narrow(-1, 0, 1), xr.narrow(-1, 1, 1)
    rope = candle.cat([x0.broadcast_mul(cos) - x1.broadcast_mul(sin),
                       x0.broadcast_mul(sin) + x1.broadcast_mul(cos)], -1).flatten_from(-2)
    assert rope.shape == (b, n_head, seq, head_dim)
    qn = np.asarray(q.values()).reshape(b, n_head, seq, head_dim // 2, 2)
    c, s = np.cos(np.asarray(m.values()))[..., None], np.sin(np.asarray(m.values()))[..., None]
    ref = np.concatenate([qn[..., :1] * c - qn[..., 1:] * s, qn[..., :1] * s + qn[..., 1:] * c], -1)
    np.testing.assert_allclose(rope.values(), ref.reshape(b, n_head, seq, head_dim), rtol=1e-4, atol=1e-5)

    # Embedding lookup and greedy sampling: index_select, get(-1), argmax_keepdim(-1).
    emb = candle.randn((10, hidden))
    token = candle.tensor([7]).unsqueeze(0)
    e = emb.index_select(token.reshape((1,)), 0).reshape((1, 1, hidden))
    assert e.values()[0][0] == emb.values()[7]
    logits = candle.tensor([[[0.1, 0.9, 0.3], [0.5, 0.2, 0.8]]])
    assert logits.get(0).get(-1).argmax_keepdim(-1).values()[0] == 2
