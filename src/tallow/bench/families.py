"""``tallow bench models``' rows per model family.

* Decoders: a random model of each GGUF family tallow runs (``llama`` — which is
  also what llama.cpp's converter makes of Mistral —, ``qwen2``, ``qwen3``,
  ``gemma3``, ``phi3``) at one small shape, written with llama.cpp's tensor names
  and metadata keys as F32 and quantized to Q8_0 by tallow's quantizer; with
  ``gemma-3-270m`` fetched, the real Gemma 3 270M Q4_K_M too. Each file is
  measured as ``tallow bench llm`` measures (its worker, one process per run, the
  implementations alternating): greedy decode tokens/s after a 32-token prompt,
  tallow beside llama.cpp when ``--llama-python`` names a Python with
  llama-cpp-python, at 1 and 2 threads; medians of the runs.
* Embedders: a random XLM-RoBERTa of multilingual-e5-small's shape (hidden 384,
  12 layers; a 2,000-piece Unigram tokenizer trained on the benchmark's
  sentences) as a sentence-transformers folder, sentences/s beside
  sentence-transformers at 1 and 2 threads (MPNet's row is all-mpnet-base-v2's,
  ``embedders.py``).
"""

from __future__ import annotations

import os

import numpy as np

from .common import table

# one shape for every decoder family: hidden 512, 8 layers, 8 query / 2 key-value
# heads of 64, MLP 1536, a 8192-token vocabulary
SHAPE = dict(vocab=8192, hidden=512, layers=8, heads=8, kv_heads=2, ffn=1536, ctx=1024,
             rope_theta=10000.0, eps=1e-6)
DECODER_FAMILIES = ("llama", "qwen2", "qwen3", "gemma3", "phi3")


def _vocab_metadata(vocab: int) -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"tok{i}" for i in range(len(tokens), vocab)]
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [0.0] * vocab,
            "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * (vocab - 259),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_bos_token": False,
            "tokenizer.ggml.add_eos_token": False}


def make_family_gguf(path: str, family: str, shape: dict = SHAPE, seed: int = 7) -> None:
    """A random F32 GGUF of ``family`` with llama.cpp's names and keys for it."""
    from ..ggml.gguf_io import write_gguf

    rng = np.random.default_rng(seed)
    h, f, nh, nkv = shape["hidden"], shape["ffn"], shape["heads"], shape["kv_heads"]
    d = h // nh
    q, kv = nh * d, nkv * d

    def w(*dims):
        return (rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    def ones(n):
        return np.ones(n, np.float32)

    tensors = {"token_embd.weight": w(shape["vocab"], h), "output_norm.weight": ones(h)}
    for i in range(shape["layers"]):
        p = f"blk.{i}"
        t = {f"{p}.attn_norm.weight": ones(h), f"{p}.attn_output.weight": w(h, q),
             f"{p}.ffn_norm.weight": ones(h), f"{p}.ffn_down.weight": w(h, f)}
        if family == "phi3":  # fused q|k|v and gate|up
            t.update({f"{p}.attn_qkv.weight": w(q + 2 * kv, h), f"{p}.ffn_up.weight": w(2 * f, h)})
        else:
            t.update({f"{p}.attn_q.weight": w(q, h), f"{p}.attn_k.weight": w(kv, h),
                      f"{p}.attn_v.weight": w(kv, h), f"{p}.ffn_gate.weight": w(f, h),
                      f"{p}.ffn_up.weight": w(f, h)})
        if family == "qwen2":
            t.update({f"{p}.attn_q.bias": w(q), f"{p}.attn_k.bias": w(kv), f"{p}.attn_v.bias": w(kv)})
        if family in ("qwen3", "gemma3"):
            t.update({f"{p}.attn_q_norm.weight": ones(d), f"{p}.attn_k_norm.weight": ones(d)})
        if family == "gemma3":
            t.update({f"{p}.post_attention_norm.weight": ones(h), f"{p}.post_ffw_norm.weight": ones(h)})
        tensors.update(t)
    if family != "gemma3":  # Gemma ties its output to the embedding
        tensors["output.weight"] = w(shape["vocab"], h)
    a = family
    meta = {"general.architecture": a, "general.name": "random",
            f"{a}.context_length": shape["ctx"], f"{a}.embedding_length": h,
            f"{a}.block_count": shape["layers"], f"{a}.feed_forward_length": f,
            f"{a}.attention.head_count": nh, f"{a}.attention.head_count_kv": nkv,
            f"{a}.attention.key_length": d, f"{a}.attention.value_length": d,
            f"{a}.attention.layer_norm_rms_epsilon": float(shape["eps"]),
            f"{a}.rope.freq_base": float(shape["rope_theta"]), f"{a}.rope.dimension_count": d,
            **_vocab_metadata(shape["vocab"])}
    if family == "gemma3":
        meta["gemma3.attention.sliding_window"] = 512
    if family == "phi3":
        # LongRoPE factors; an original context as long as the one llama.cpp's worker
        # opens (tallow's and llama.cpp's rules then both pick the short factors)
        tensors["rope_factors_long.weight"] = np.linspace(1.0, 8.0, d // 2, dtype=np.float32)
        tensors["rope_factors_short.weight"] = np.linspace(1.0, 1.5, d // 2, dtype=np.float32)
        meta.update({"phi3.context_length": 4 * shape["ctx"],
                     "phi3.rope.scaling.original_context_length": shape["ctx"],
                     "phi3.rope.scaling.attn_factor": 1.19, "phi3.attention.sliding_window": 0})
    # llama.cpp reads its integer keys as u32 (a plain int would be written as i32)
    meta = {k: np.uint32(v) if type(v) is int else v for k, v in meta.items()}
    write_gguf(path, tensors, meta)


def family_files(folder: str, families=DECODER_FAMILIES, fmt: str = "Q8_0",
                 shape: dict = SHAPE) -> dict:
    """{name: path} of the families' ``fmt`` files in ``folder`` (written where missing),
    and gemma-3-270m's file when it has been fetched."""
    from ..models.packaged import gemma3_270m_path
    from .llm import quantize_file

    os.makedirs(folder, exist_ok=True)
    files = {}
    for fam in families:
        path = os.path.join(folder, f"{fam}-{fmt}.gguf")
        if not os.path.exists(path):
            f32 = os.path.join(folder, f"{fam}-F32.gguf")
            if not os.path.exists(f32):
                make_family_gguf(f32, fam, shape)
            if fmt == "F32":
                path = f32
            else:
                quantize_file(f32, path, fmt)
        files[f"{fam} {fmt}"] = path
    real = gemma3_270m_path(assemble=False)
    if real is not None:
        files["gemma-3-270m Q4_K_M"] = real
    return files


def bench_decoders(folder: str, python: str | None, threads=(1, 2), repeats: int = 3,
                   decode: int = 64, quiet: bool = False, shape: dict = SHAPE) -> dict:
    """{file: {threads: {impl: {...decode_tps...}}}}: each family's decode, tallow
    beside llama.cpp (``python``: a Python with llama-cpp-python), at each thread count."""
    from .llm import bench_llm

    files = family_files(folder, shape=shape)
    impls = ("tallow", "llama.cpp") if python else ("tallow",)
    res = bench_llm(files, threads=threads, impls=impls, repeats=repeats, prompt=32, decode=decode,
                    python=python, quiet=True)
    if not quiet:
        rows = []
        for name, by_t in res.items():
            for t in threads:
                by_impl = by_t.get(t, {})
                ours = by_impl.get("tallow", {}).get("decode_tps")
                theirs = by_impl.get("llama.cpp", {}).get("decode_tps")
                rows.append([name, t, ours, theirs,
                             ours / theirs if ours and theirs else None])
        print(table(f"decoder families: greedy decode tokens/s after a 32-token prompt ({decode} steps), "
                    f"medians of {repeats} alternating runs in fresh processes",
                    ["file", "threads", "tallow", "llama.cpp", "ratio"], rows))
    return {"shape": shape, "decode_steps": decode, "repeats": repeats, "files": res}


def make_random_xlmr(folder: str, texts, seed: int = 0) -> str:
    """A random XLM-RoBERTa sentence-transformers folder (mean pooling, normalised)."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import SentencePieceUnigramTokenizer, processors
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    base = os.path.join(folder, "xlmr-base")
    tok = SentencePieceUnigramTokenizer()
    tok.train_from_iterator(list(texts), vocab_size=2000,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    hf_tok = XLMRobertaTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<s>",
                                     eos_token="</s>", sep_token="</s>", cls_token="<s>",
                                     unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    hf_tok.save_pretrained(base)
    torch.manual_seed(seed)
    cfg = XLMRobertaConfig(vocab_size=len(hf_tok) + 4, hidden_size=384, num_hidden_layers=12,
                           num_attention_heads=12, intermediate_size=1536,
                           max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2)
    XLMRobertaModel(cfg, add_pooling_layer=False).eval().save_pretrained(base)
    word = models.Transformer(base, max_seq_length=256)
    dim = word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") \
        else word.get_word_embedding_dimension()
    st = SentenceTransformer(modules=[word, models.Pooling(dim, pooling_mode="mean"),
                                      models.Normalize()], device="cpu")
    out = os.path.join(folder, "xlmr-st")
    st.save(out)
    return out


def bench_embed_xlmr(texts, rounds: int = 3, thread_counts=(1, 2), quiet: bool = False):
    """A random XLM-RoBERTa (multilingual-e5-small's shape) beside sentence-transformers;
    None when sentence-transformers / transformers are not installed."""
    import tempfile

    from .embedders import bench_embedder

    try:
        import sentence_transformers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        if not quiet:
            print(f"  embed XLM-RoBERTa: skipped ({e})")
        return None
    with tempfile.TemporaryDirectory(prefix="tallow-xlmr-") as d:
        path = make_random_xlmr(d, texts)
        return bench_embedder(path, "XLM-RoBERTa (random, multilingual-e5-small's shape)", texts,
                              rounds=rounds, thread_counts=thread_counts, quiet=quiet)
