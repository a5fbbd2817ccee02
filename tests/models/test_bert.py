"""BERT and SentenceEmbedder against transformers / sentence-transformers."""

import json
import shutil

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.models.bert import BertConfig, BertModel
from tallow.models.config import ModelFormatError
from tallow.models.sentence import SentenceEmbedder

SENTENCES = [
    "A man is eating food.",
    "Tallow runs tensors on the CPU and the GPU, with views that cost nothing.",
    "Hi",
    "The quick brown fox jumps over the lazy dog while the cat watches from a sunny "
    "windowsill, wondering why anyone would jump over a dog at all.",
    "Embeddings!",
]


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm_dir, st_minilm):
    ours = SentenceEmbedder.from_pretrained(minilm_dir)
    want = st_minilm.encode(SENTENCES, batch_size=8)
    batched = ours.encode(SENTENCES, batch_size=8)  # one padded batch
    single = ours.encode(SENTENCES, batch_size=1)   # no padding at all
    assert batched.shape == (len(SENTENCES), 384) and batched.dtype == np.float32
    assert cosines(batched, want).min() >= 0.99999
    assert cosines(single, want).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    # a single string gives one vector
    one = ours.encode(SENTENCES[1])
    assert one.shape == (384,)
    assert cosines(one[None], want[1:2])[0] >= 0.99999
    # similar sentences are closer than unrelated ones
    a, b, c = ours.encode(["A man is eating food.", "A man eats a meal.", "Tensors on a GPU."])
    assert a @ b > a @ c


def test_tiny_bert_hidden_states_match_transformers(tiny_bert_dir, device):
    from transformers import BertModel as HFBert

    hf = HFBert.from_pretrained(tiny_bert_dir).eval()
    cfg = BertConfig.from_json(tiny_bert_dir / "config.json")
    vb = tl.nn.VarBuilder.from_safetensors(tiny_bert_dir / "model.safetensors", device=device)
    ours = BertModel.load(vb, cfg)
    ids = np.array([[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0]], np.int64)
    mask = (ids != 0).astype(np.int64)
    types = np.zeros_like(ids)
    types[0, 3:] = 1
    with torch.no_grad():
        want = hf(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                  token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    got = ours.forward(tl.Tensor(ids.astype(np.uint32), device=device),
                       tl.Tensor(types.astype(np.uint32), device=device),
                       tl.Tensor(mask.astype(np.uint32), device=device)).numpy()
    valid = mask.astype(bool)
    np.testing.assert_allclose(got[valid], want[valid], atol=2e-5, rtol=1e-5)
    # without a mask nor token types
    with torch.no_grad():
        want2 = hf(torch.from_numpy(ids[:1])).last_hidden_state.numpy()
    got2 = ours.forward(tl.Tensor(ids[:1].astype(np.uint32), device=device)).numpy()
    np.testing.assert_allclose(got2, want2, atol=2e-5, rtol=1e-5)


def test_unpadded_forward_matches_transformers_on_mixed_lengths(tiny_bert_dir, device):
    """Packed dense layers + padded attention: the kept positions as transformers gives
    them for every length in the batch, zeros at the padding; and the padded
    forward keeps its values."""
    from transformers import BertModel as HFBert

    hf = HFBert.from_pretrained(tiny_bert_dir).eval()
    cfg = BertConfig.from_json(tiny_bert_dir / "config.json")
    vb = tl.nn.VarBuilder.from_safetensors(tiny_bert_dir / "model.safetensors", device=device)
    ours = BertModel.load(vb, cfg)
    rng = np.random.default_rng(0)
    lengths = [9, 1, 5, 9, 3, 7]
    ids = np.zeros((len(lengths), 9), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(1000, 5000, n)
    mask = (np.arange(9)[None] < np.array(lengths)[:, None]).astype(np.int64)
    types = (np.arange(9)[None] >= 2).astype(np.int64) * mask
    with torch.no_grad():
        want = hf(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                  token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    args = [tl.Tensor(a.astype(np.uint32), device=device) for a in (ids, types, mask)]
    got = ours.forward_unpadded(*args).numpy()
    valid = mask.astype(bool)
    np.testing.assert_allclose(got[valid], want[valid], atol=2e-5, rtol=1e-5)
    assert (got[~valid] == 0).all()
    padded = ours.forward(*args).numpy()
    np.testing.assert_allclose(padded[valid], got[valid], atol=2e-5, rtol=1e-5)
    # padding first in one row (kept tokens not a prefix): the padded attention serves
    left = mask.copy()
    left[1] = 0
    left[1, 4:] = 1
    with torch.no_grad():
        want_l = hf(torch.from_numpy(ids), attention_mask=torch.from_numpy(left),
                    token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    got_l = ours.forward_unpadded(args[0], args[1], tl.Tensor(left.astype(np.uint32), device=device)).numpy()
    np.testing.assert_allclose(got_l[left.astype(bool)], want_l[left.astype(bool)], atol=2e-5, rtol=1e-5)
    # nothing to leave out: the plain forward
    full = [a.narrow(0, 0, 1) for a in args]
    np.testing.assert_allclose(ours.forward_unpadded(*full).numpy(), ours.forward(*full[:2]).numpy(),
                               atol=1e-6)


def test_unpadded_forward_with_var_weights_keeps_gradients(tiny_bert_dir):
    """With trainable weights the packed path is composed of differentiable ops."""
    cfg = BertConfig.from_json(tiny_bert_dir / "config.json")
    vb = tl.nn.VarBuilder.from_safetensors(tiny_bert_dir / "model.safetensors")
    ours = BertModel.load(vb, cfg)
    layer = ours.encoder.layer[0].intermediate.dense
    layer.weight = tl.Var(layer.weight.numpy())
    ids = tl.Tensor(np.array([[101, 2023, 102], [101, 102, 0]], np.uint32))
    mask = tl.Tensor(np.array([[1, 1, 1], [1, 1, 0]], np.uint32))
    out = ours.forward_unpadded(ids, None, mask)
    grads = out.sqr().sum_all().backward()
    g = grads.get(layer.weight)
    assert g is not None and g.shape == layer.weight.shape and float(g.abs().sum_all().numpy()) > 0


def _st_dir(base, tmp_path, mode, normalize):
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(base), max_seq_length=48)
    pool = models.Pooling(word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") else word.get_word_embedding_dimension(), pooling_mode=mode)
    mods = [word, pool] + ([models.Normalize()] if normalize else [])
    st = SentenceTransformer(modules=mods, device="cpu")
    out = tmp_path / f"st_{mode}_{normalize}"
    st.save(str(out))
    return out, st


@pytest.mark.parametrize("mode,normalize", [("cls", False), ("max", True),
                                            ("mean_sqrt_len_tokens", False), ("mean", False)])
def test_pooling_modes_match_sentence_transformers(tiny_bert_dir, tmp_path, mode, normalize):
    path, st = _st_dir(tiny_bert_dir, tmp_path, mode, normalize)
    ours = SentenceEmbedder.from_pretrained(path)
    assert ours.normalize == normalize and ours.max_seq_length == 48
    want = st.encode(SENTENCES, batch_size=4)
    # normalize=None follows the directory, as sentence-transformers does
    got = ours.encode(SENTENCES, batch_size=4, normalize=None)
    np.testing.assert_allclose(got, want, atol=3e-5, rtol=1e-4)
    # the default follows the directory too; normalize=True forces unit vectors
    default = ours.encode(SENTENCES[:2])
    np.testing.assert_allclose(default, want[:2], atol=3e-5, rtol=1e-4)
    forced = ours.encode(SENTENCES[:2], normalize=True)
    np.testing.assert_allclose(forced, want[:2] / np.linalg.norm(want[:2], axis=1, keepdims=True),
                               atol=3e-5, rtol=1e-4)
    raw = ours.encode(SENTENCES[:2], normalize=False)
    if not normalize:
        np.testing.assert_allclose(raw, want[:2], atol=3e-5, rtol=1e-4)


def test_long_texts_are_truncated_like_sentence_transformers(tiny_bert_dir, tmp_path):
    path, st = _st_dir(tiny_bert_dir, tmp_path, "mean", True)
    ours = SentenceEmbedder.from_pretrained(path)
    text = [" ".join(["word"] * 200), "short"]
    np.testing.assert_allclose(ours.encode(text), st.encode(text), atol=3e-5)


def test_bad_model_directories(tmp_path, tiny_bert_dir, tiny_llama):
    with pytest.raises(FileNotFoundError):
        SentenceEmbedder.from_pretrained(tmp_path / "missing")
    # another architecture
    with pytest.raises(ModelFormatError, match="llama"):
        SentenceEmbedder.from_pretrained(tiny_llama[0])
    # no weights
    d = tmp_path / "noweights"
    d.mkdir()
    shutil.copy(tiny_bert_dir / "config.json", d / "config.json")
    shutil.copy(tiny_bert_dir / "tokenizer.json", d / "tokenizer.json")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        SentenceEmbedder.from_pretrained(d)
    # a tokenizer with more tokens than the model's vocabulary
    m = tmp_path / "mismatch"
    shutil.copytree(tiny_bert_dir, m)
    cfg = json.loads((m / "config.json").read_text())
    cfg["vocab_size"] = 1000
    (m / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match="tokenizer"):
        SentenceEmbedder.from_pretrained(m)
    # a broken tokenizer file
    b = tmp_path / "badtok"
    shutil.copytree(tiny_bert_dir, b)
    (b / "tokenizer.json").write_text("{nope")
    with pytest.raises(ModelFormatError, match="tokenizer"):
        SentenceEmbedder.from_pretrained(b)


def test_bert_errors(tiny_bert_dir):
    cfg = BertConfig.from_json(tiny_bert_dir)
    ours = BertModel.load(tl.nn.VarBuilder.from_safetensors(tiny_bert_dir / "model.safetensors"), cfg)
    with pytest.raises(tl.ShapeMismatchError, match="max_position_embeddings"):
        ours.forward(tl.zeros((1, 65), dtype=tl.u32))
    with pytest.raises(tl.ShapeMismatchError):
        ours.forward(tl.zeros((5,), dtype=tl.u32))
    with pytest.raises(ModelFormatError):
        BertModel.load(tl.nn.VarBuilder.from_tensors({"x": tl.zeros((1,))}), cfg)
    with pytest.raises(ModelFormatError):
        BertConfig.from_dict({"model_type": "bert", "hidden_size": 10})


def test_encode_edge_cases(tiny_bert_dir, tmp_path):
    path, _ = _st_dir(tiny_bert_dir, tmp_path, "mean", True)
    ours = SentenceEmbedder.from_pretrained(path)
    assert ours.encode([]).shape == (0, 32)
    with pytest.raises(TypeError):
        ours.encode(["ok", 3])
    with pytest.raises(ValueError):
        ours.encode(["ok"], batch_size=0)
    # results come back in input order whatever the batching
    texts = [f"sentence number {i} " + "x " * (i % 7) for i in range(23)]
    a = ours.encode(texts, batch_size=5)
    b = np.stack([ours.encode(t) for t in texts])
    np.testing.assert_allclose(a, b, atol=2e-6)


def test_sentence_embedder_on_every_device(tiny_bert_dir, tmp_path, device):
    path, st = _st_dir(tiny_bert_dir, tmp_path, "mean", True)
    ours = SentenceEmbedder.from_pretrained(path, device=device)
    np.testing.assert_allclose(ours.encode(SENTENCES, batch_size=2), st.encode(SENTENCES),
                               atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64"])
def test_sentence_embedder_dtypes(tiny_bert_dir, tmp_path, dtype):
    path, _ = _st_dir(tiny_bert_dir, tmp_path, "mean", True)
    ref = SentenceEmbedder.from_pretrained(path).encode(SENTENCES)
    got = SentenceEmbedder.from_pretrained(path, dtype=dtype).encode(SENTENCES)
    assert got.dtype == np.float32
    assert cosines(got, ref).min() > (0.999 if dtype == "bf16" else 0.99999)
