"""Several sequences decoded together (``new_sequence`` / ``prefill`` / ``step_batch``).

Oracles: transformers (each sequence's logits at every step, from the whole
token sequence without a cache) and the same model decoding each sequence
alone, whose logits the batched rows must reproduce:

- quantized products (the GGUF fast path and the Tensor path): the same bits,
  since a several-row product quantizes and sums each row as the one-row
  product does;
- float products: within 1e-4 (a several-row product may sum in another order).
"""

import gc
import os
import tracemalloc

import numpy as np
import pytest
import torch

import tallow as tl
from tallow import config
from tallow.errors import IndexOutOfRangeError, InvalidArgumentError, ShapeMismatchError
from tallow.models import llama_decode
from tallow.models.decoders import decoder_config
from tallow.models.llama import ContextLengthError, Llama
from tallow.models.quantized_llama import ModelWeights

from support.models import QLLAMA_CFG, add_decoder_shape, save_llama_gguf, write_hf_tensors

SMALL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=400,
             rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0)
ATOL = 1e-4

# Prompts of different lengths (two past the sliding windows below), who joins before
# which step, who leaves before which step.
PROMPTS = [[(5 * i + 7 * j + 3) % 300 + 5 for i in range(n)] for j, n in enumerate((5, 13, 1, 20))]
JOINS = {0: [0, 1], 2: [2], 3: [3]}
LEAVES = {5: [0]}
STEPS = 8


# ----------------------------------------------------------------- the families
def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(**SMALL, tie_word_embeddings=True))


def _mistral():
    from transformers import MistralConfig, MistralForCausalLM
    return MistralForCausalLM(MistralConfig(**SMALL, sliding_window=12, tie_word_embeddings=False))


def _qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    # biases on q/k/v; sliding layers after a full one
    return Qwen2ForCausalLM(Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=10,
                                        max_window_layers=1, tie_word_embeddings=False))


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    return Qwen3ForCausalLM(Qwen3Config(**SMALL, head_dim=32, tie_word_embeddings=True))


def _gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    # sliding layers with their own rotary base, a global one, a final soft cap
    return Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "num_hidden_layers": 4, "head_dim": 16, "query_pre_attn_scalar": 24,
        "sliding_window": 10, "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True}))


def _phi3():
    from transformers import Phi3Config, Phi3ForCausalLM
    # LongRoPE with an original context of 24: in the last step one row rotates with
    # the long factors (position 24), the others with the short ones
    half = SMALL["hidden_size"] // SMALL["num_attention_heads"] // 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0 + 0.1 * i for i in range(half)],
            "long_factor": [1.0 + 0.7 * i for i in range(half)],
            "original_max_position_embeddings": 24}
    return Phi3ForCausalLM(Phi3Config(**SMALL, rope_parameters=rope,
                                      original_max_position_embeddings=24,
                                      tie_word_embeddings=False, pad_token_id=0))


FAMILIES = {"llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3,
            "gemma3": _gemma3, "phi3": _phi3}


def _perturbed(build, seed):
    torch.manual_seed(seed)
    hf = build()
    hf.config._attn_implementation = "eager"
    hf.eval()
    with torch.no_grad():  # transformers initialises biases and norms to constants
        for name, p in hf.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return hf


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    hf = _perturbed(FAMILIES[request.param], 4)
    d = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(d)
    vb = tl.nn.VarBuilder.from_safetensors(os.path.join(d, "model.safetensors"), dtype=tl.f32)
    return Llama.load(vb, decoder_config(d)), hf


# ----------------------------------------------------------------- GGUF Qwen2 / Gemma 3
def write_q8_gguf(hf, arch, path):
    """A transformers Qwen2 or Gemma 3 as llama.cpp's converter lays it out, its 2-D
    weights in Q8_0 (quantized by the gguf package)."""
    import gguf

    c = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    add_decoder_shape(w, c)
    rope = c.rope_parameters["full_attention"] if arch == "gemma3" else c.rope_parameters
    w.add_rope_freq_base(rope["rope_theta"])
    if arch == "gemma3":
        w.add_sliding_window(c.sliding_window)
    write_hf_tensors(w, hf, arch)


def _qwen2_gguf():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    # llama.cpp's Qwen2 has no sliding layers
    return Qwen2ForCausalLM(Qwen2Config(**SMALL, tie_word_embeddings=False))


def _gemma3_gguf():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    # llama.cpp's fixed Gemma 3 choices: every sixth layer global, local base 10000
    return Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "tie_word_embeddings": True, "num_hidden_layers": 6, "head_dim": 16,
        "query_pre_attn_scalar": 16, "sliding_window": 10,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}))


def _qwen3_gguf():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    return Qwen3ForCausalLM(Qwen3Config(**SMALL, head_dim=32, tie_word_embeddings=True))


# Qwen2 (q/k/v biases), Qwen3 (q/k norms) and Gemma 3 (sandwich norms, sliding
# layers) on the array fast path
@pytest.mark.parametrize("arch,kind", [("qwen2", ModelWeights), ("qwen3", ModelWeights),
                                       ("gemma3", ModelWeights)])
def test_gguf_families_join_and_leave_mid_way(arch, kind, tmp_path):
    from tallow.models.gguf_models import load_gguf_model

    hf = _perturbed({"qwen2": _qwen2_gguf, "qwen3": _qwen3_gguf, "gemma3": _gemma3_gguf}[arch], 6)
    write_q8_gguf(hf, arch, tmp_path / "m.gguf")
    model = load_gguf_model(tmp_path / "m.gguf")
    assert isinstance(model, kind)
    if kind is ModelWeights and llama_decode.available():
        assert model._decoder is not None
    got, tokens, _ = run_schedule(model)
    check_against_alone(model, got, tokens, exact=True)
    for i, lg in got.items():  # Q8_0 weights: near transformers' f32 logits
        np.testing.assert_allclose(lg, hf_logits(hf, PROMPTS[i], tokens[i]), atol=0.05, rtol=0)


# ----------------------------------------------------------------- GGUF Llama files
GGUF_CFG = dict(QLLAMA_CFG, max_position_embeddings=640, tie_word_embeddings=True)
FORMATS = ["F32", "F16", "Q8_0", "Q4_0", "Q4K"]


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    hf = LlamaForCausalLM(LlamaConfig(**GGUF_CFG)).eval()
    d = tmp_path_factory.mktemp("step_batch_gguf")
    out = {}
    for fmt in FORMATS:
        path = d / f"m-{fmt}.gguf"
        if fmt == "F16":
            _save_f16(hf, path)
        else:
            save_llama_gguf(hf, path, fmt)
        out[fmt] = str(path)
    return out, hf


def _save_f16(hf, path):
    from tallow.ggml.gguf_io import read_gguf, write_gguf

    tmp = str(path) + ".f32"
    save_llama_gguf(hf, tmp, "F32")
    f = read_gguf(tmp)
    tensors = {n: (t.dequantize().astype(np.float16) if len(t.shape) == 2 else t)
               for n, t in f.tensors.items()}
    write_gguf(path, tensors, f.metadata)


def gguf_model(path, fast=True):
    if fast:
        if not llama_decode.available():
            pytest.skip("the C extension is not built")
        model = ModelWeights.from_gguf(path)
        assert model._decoder is not None
        return model
    with config.settings.override(no_native=True):
        model = ModelWeights.from_gguf(path)
    assert model._decoder is None
    return model


def _exact(fmt):
    return fmt not in ("F32", "F16")


# ----------------------------------------------------------------- helpers
def run_schedule(model, prompts=PROMPTS, joins=JOINS, leaves=LEAVES, steps=STEPS):
    """Greedy decoding of several sequences that join and leave between steps; returns
    each sequence's logits (prefill's, then one per step) and its tokens."""
    seqs, logits, tokens = {}, {}, {}
    sizes = []
    for step in range(steps):
        for i in leaves.get(step, []):
            seqs.pop(i).release()
        for i in joins.get(step, []):
            seqs[i] = model.new_sequence()
            logits[i] = [model.prefill(seqs[i], prompts[i])]
            tokens[i] = []
        order = sorted(seqs)
        ids = [int(np.argmax(logits[i][-1])) for i in order]
        out = model.step_batch([seqs[i] for i in order], ids)
        assert out.shape == (len(order), model.config.vocab_size) and out.dtype == np.float32
        sizes.append(len(order))
        for i, t, row in zip(order, ids, out):
            tokens[i].append(t)
            logits[i].append(row)
    for s in seqs.values():
        s.release()
    return {i: np.array(v) for i, v in logits.items()}, tokens, sizes


def run_alone(model, prompt, steps):
    with model.new_sequence() as seq:
        logits = [model.prefill(seq, prompt)]
        tokens = []
        for _ in range(steps):
            tokens.append(int(np.argmax(logits[-1])))
            logits.append(model.step_batch([seq], [tokens[-1]])[0])
    return np.array(logits), tokens


def hf_logits(hf, prompt, tokens):
    """transformers' logits of the prompt's last position and after each token, decoded
    as tallow decodes (the prompt, then a token at a time on its cache: Phi-3's LongRoPE
    picks its factors by the length of each call)."""
    out = []
    with torch.no_grad():
        r = hf(torch.tensor([prompt]), use_cache=True)
        out.append(r.logits[0, -1].numpy())
        for t in tokens:
            r = hf(torch.tensor([[t]]), past_key_values=r.past_key_values, use_cache=True)
            out.append(r.logits[0, -1].numpy())
    return np.array(out)


def check_against_alone(model, got, tokens, exact, prompts=PROMPTS):
    for i, lg in got.items():
        want, want_tokens = run_alone(model, prompts[i], len(tokens[i]))
        assert tokens[i] == want_tokens, f"sequence {i}"
        if exact:
            np.testing.assert_array_equal(lg, want, err_msg=f"sequence {i}")
        else:
            np.testing.assert_allclose(lg, want, atol=ATOL, rtol=0, err_msg=f"sequence {i}")


# ----------------------------------------------------------------- the Tensor path
def test_families_join_and_leave_mid_way(family):
    model, hf = family
    got, tokens, sizes = run_schedule(model)
    assert sizes == [2, 2, 3, 4, 4, 3, 3, 3]  # joins and leaves change B between steps
    for i, lg in got.items():
        np.testing.assert_allclose(lg, hf_logits(hf, PROMPTS[i], tokens[i]), atol=ATOL, rtol=0,
                                   err_msg=f"sequence {i}")
    check_against_alone(model, got, tokens, exact=False)


def test_tensor_path_rows_do_not_influence_each_other(family):
    model, _ = family
    assert_row_independent(model, exact=False, alone_exact=False)


def test_tensor_path_cache_grows_past_its_first_reservation(family):
    model, hf = family
    scaling = model.config.rope_scaling or {}
    # transformers turns a whole prompt longer than LongRoPE's original context with
    # the long factors; tallow turns each position by its own (the same once cached)
    longrope = scaling.get("rope_type") == "longrope"
    assert_cache_grows(model, exact=False, hf=None if longrope else hf)


# ----------------------------------------------------------------- GGUF Llama
@pytest.mark.parametrize("fmt,fast", [(f, True) for f in FORMATS] + [("F32", False), ("Q4_0", False)],
                         ids=[f"{f}-fast" for f in FORMATS] + ["F32-tensor", "Q4_0-tensor"])
def test_gguf_join_and_leave_mid_way(fmt, fast, gguf_files):
    files, hf = gguf_files
    model = gguf_model(files[fmt], fast)
    got, tokens, _ = run_schedule(model)
    check_against_alone(model, got, tokens, exact=_exact(fmt))
    if fmt == "F32":
        for i, lg in got.items():
            np.testing.assert_allclose(lg, hf_logits(hf, PROMPTS[i], tokens[i]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("fmt", ["F32", "F16", "Q4_0", "Q4K"])
def test_batches_of_one_to_eight(fmt, gguf_files):
    # float products switch kernels with the row count (a row-streaming one up to 4)
    files, _ = gguf_files
    model = gguf_model(files[fmt])
    rng = np.random.default_rng(5)
    prompts = [rng.integers(0, GGUF_CFG["vocab_size"], n).tolist() for n in (3, 11, 1, 7, 16, 2, 9, 5)]
    alone = [run_alone(model, p, 3) for p in prompts]
    for b in range(1, 9):
        seqs = [model.new_sequence() for _ in range(b)]
        first = np.array([model.prefill(s, p) for s, p in zip(seqs, prompts)])
        rows = [first]
        for k in range(3):
            rows.append(model.step_batch(seqs, [alone[i][1][k] for i in range(b)]))
        got = np.stack(rows, axis=1)  # (b, steps + 1, vocab)
        want = np.array([alone[i][0] for i in range(b)])
        if _exact(fmt):
            np.testing.assert_array_equal(got, want, err_msg=f"B={b}")
        else:
            np.testing.assert_allclose(got, want, atol=ATOL, rtol=0, err_msg=f"B={b}")
        for s in seqs:
            s.release()


@pytest.mark.parametrize("fmt", ["F32", "Q8_0", "Q4_0", "Q4K"])
def test_gguf_rows_do_not_influence_each_other(fmt, gguf_files):
    files, _ = gguf_files
    # the same bits whatever the other rows hold, float products too (their sums
    # depend on the row count, not on the other rows' values)
    assert_row_independent(gguf_model(files[fmt]), exact=True, alone_exact=_exact(fmt))


def test_gguf_cache_grows_past_its_first_reservation(gguf_files):
    files, hf = gguf_files
    model = gguf_model(files["Q8_0"])
    assert_cache_grows(model, exact=True)


def assert_row_independent(model, exact, alone_exact):
    """Row 0's logits are those of row 0 whatever the other rows hold (6 rows: float
    products take their several-row kernel)."""
    vocab = model.config.vocab_size
    rng = np.random.default_rng(7)
    mine = rng.integers(0, vocab, 6).tolist()

    def row0(others, tokens):
        seqs = [model.new_sequence() for _ in range(1 + len(others))]
        model.prefill(seqs[0], mine)
        for s, p in zip(seqs[1:], others):
            model.prefill(s, p)
        out = model.step_batch(seqs, [17] + tokens)
        for s in seqs:
            s.release()
        return out[0]

    a = row0([rng.integers(0, vocab, n).tolist() for n in (2, 9, 4, 12, 1)], [1, 2, 3, 4, 5])
    b = row0([rng.integers(0, vocab, n).tolist() for n in (7, 3, 15, 1, 8)], [250, 9, 31, 77, 0])
    big = row0([[v % vocab for v in range(n, 3 * n, 2)] for n in (5, 6, 7, 8, 9)], [3] * 5)
    if exact:
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, big)
    else:
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a, big, atol=1e-5, rtol=0)
    with model.new_sequence() as alone:
        model.prefill(alone, mine)
        want = model.step_batch([alone], [17])[0]
    if alone_exact:
        np.testing.assert_array_equal(a, want)
    else:
        np.testing.assert_allclose(a, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q8_0", "Q5_0", "Q4_1", "Q5_1", "Q4K", "Q5K", "Q6K",
                                 "IQ4_XS"])
def test_a_several_row_product_quantizes_each_row_alone(fmt):
    # the other rows 10^4 times larger: a scale shared across rows would make row 0's
    # 8-bit activations far coarser than its own
    from tallow.backends.cpu import native
    from tallow.quantized import ggml_type

    if not native.supports(fmt):
        pytest.skip(f"no compiled {fmt} kernel")
    rng = np.random.default_rng(11)
    n, k = 64, 512
    t = ggml_type(fmt)
    raw = t.quantize(rng.standard_normal((n, k)).astype(np.float32))
    w = native.NativeWeight(raw, t, n, k)
    deq = t.dequantize(np.asarray(raw).reshape(-1), n * k).reshape(n, k).astype(np.float64)
    x = rng.standard_normal((6, k)).astype(np.float32)
    loud = x.copy()
    loud[1:] *= 1e4
    alone = np.empty(n, np.float32)
    w.matvec(np.ascontiguousarray(x[0]), alone)
    for rows in (x, loud):
        got = w.matmul_t(rows)[0]
        np.testing.assert_array_equal(got, alone)  # the one-row product's bits
        # NumPy's exact product, off by at most the rounding of row 0's own 8-bit levels
        exact = deq @ x[0].astype(np.float64)
        bound = np.abs(deq).sum(axis=1) * np.abs(x[0]).max() / 254 * 1.01 + 1e-4
        assert (np.abs(got - exact) <= bound).all()


def assert_cache_grows(model, exact, hf=None):
    """A 250-token sequence stepped with a short one past 256 positions (the caches'
    first reservation) and on: rows equal the sequence decoded alone."""
    rng = np.random.default_rng(9)
    vocab = model.config.vocab_size
    long, short = rng.integers(0, vocab, 250).tolist(), rng.integers(0, vocab, 3).tolist()
    a, b = model.new_sequence(), model.new_sequence()
    la, lb = [model.prefill(a, long)], [model.prefill(b, short)]
    ta, tb = [], []
    for _ in range(12):
        ta.append(int(np.argmax(la[-1])))
        tb.append(int(np.argmax(lb[-1])))
        out = model.step_batch([a, b], [ta[-1], tb[-1]])
        la.append(out[0])
        lb.append(out[1])
    assert a.position == 262 and b.position == 15
    state = getattr(a.cache, "_decode_state", None)
    if state is not None:
        assert state.cap == 512
    want, want_tokens = run_alone(model, long, 12)
    assert ta == want_tokens
    if exact:
        np.testing.assert_array_equal(np.array(la), want)
    else:
        np.testing.assert_allclose(np.array(la), want, atol=ATOL, rtol=0)
    if hf is not None:
        np.testing.assert_allclose(np.array(la), hf_logits(hf, long, ta), atol=ATOL, rtol=0)
    a.release()
    b.release()


# ----------------------------------------------------------------- release and errors
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tensor"])
def test_a_released_sequence_frees_its_cache_at_once(fast, gguf_files):
    files, _ = gguf_files
    model = gguf_model(files["Q8_0"], fast)
    c = GGUF_CFG
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    # keys and values of every layer, 256 positions reserved (the first reservation)
    kv_bytes = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * 256 * head_dim * 4
    keep = model.new_sequence()
    model.prefill(keep, [1, 2, 3])
    gc.collect()
    tracemalloc.start()
    try:
        seq = model.new_sequence()
        model.prefill(seq, list(range(1, 200)))
        model.step_batch([seq, keep], [5, 6])
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        seq.release()
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert freed >= 0.9 * kv_bytes, (freed, kv_bytes)
    assert seq.released
    with pytest.raises(InvalidArgumentError, match="released"):
        model.step_batch([seq, keep], [1, 2])
    with pytest.raises(InvalidArgumentError, match="released"):
        model.prefill(seq, [1])
    # the other sequence goes on as if alone
    got = model.step_batch([keep], [7])[0]
    want, _ = run_alone(model, [1, 2, 3, 6, 7], 0)
    np.testing.assert_array_equal(got, want[0])


def test_misuse_is_refused_with_the_fix(gguf_files):
    files, _ = gguf_files
    model = gguf_model(files["Q4_0"])
    other = gguf_model(files["Q4_0"])
    a, b = model.new_sequence(), model.new_sequence(max_context=4)
    model.prefill(a, [1, 2])
    model.prefill(b, [1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="twice"):
        model.step_batch([a, a], [1, 2])
    with pytest.raises(ShapeMismatchError, match="one token per sequence"):
        model.step_batch([a, b], [1])
    with pytest.raises(ShapeMismatchError):
        model.step_batch([], [])
    with pytest.raises(IndexOutOfRangeError, match="vocabulary"):
        model.step_batch([a, b], [1, GGUF_CFG["vocab_size"]])
    with pytest.raises(InvalidArgumentError, match="another model"):
        other.step_batch([a], [1])
    model.step_batch([a, b], [1, 2])  # b now holds 4 of its 4 positions
    with pytest.raises(ContextLengthError, match="sequence 1 is full"):
        model.step_batch([a, b], [1, 2])
    assert a.position == 3 and b.position == 4  # a refused step changes nothing
    with pytest.raises(ShapeMismatchError):
        model.prefill(a, [])


# ----------------------------------------------------------------- SmolLM2-135M (real)
def test_smollm2_sequences_decoded_together_equal_each_alone(smollm2_gguf):
    from tallow.models.gguf_models import load_gguf_model
    from tallow.models.gguf_tokenizer import tokenizer_from_gguf

    model = load_gguf_model(smollm2_gguf)
    tok = tokenizer_from_gguf(smollm2_gguf)
    texts = ["The capital of France is", "def fibonacci(n):",
             "Once upon a time, in a small village by the sea, there lived an old fisherman who",
             "1, 2, 3, 4,"]
    prompts = [tok.encode(t).ids for t in texts]
    assert len({len(p) for p in prompts}) == 4
    got, tokens, sizes = run_schedule(model, prompts)
    assert max(sizes) == 4
    # the fast path's quantized products: bit for bit each sequence alone
    check_against_alone(model, got, tokens, exact=model._decoder is not None, prompts=prompts)
    # and the greedy text of the first equals TextGenerator's (tallow generate's loop)
    from tallow.models.generate import TextGenerator

    gen = TextGenerator(model, tok, temperature=0, eos_token_ids=[])
    assert gen.generate(prompts[0], max_tokens=len(tokens[0])).token_ids == tokens[0]


@pytest.mark.gpu
def test_gpu_sequences_decoded_together_equal_each_alone(gpu, gguf_files):
    files, hf = gguf_files
    model = ModelWeights.from_gguf(files["F32"], gpu)
    got, tokens, _ = run_schedule(model)
    check_against_alone(model, got, tokens, exact=False)
    for i, lg in got.items():
        np.testing.assert_allclose(lg, hf_logits(hf, PROMPTS[i], tokens[i]), atol=ATOL, rtol=0)
