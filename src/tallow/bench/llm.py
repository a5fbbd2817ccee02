"""``tallow bench llm``: a GGUF Llama's decode and prompt speed and peak memory, per file format.

For each file (``model-<FORMAT>.gguf`` in ``--models DIR``), each thread count
and each repeat, every implementation runs once in its own process
(:mod:`tallow.bench.llm_worker`), in an order that rotates between repeats:
tallow, and llama.cpp through llama-cpp-python when ``--llama-python`` names a
Python that has it (it is a benchmark-only dependency, usually in its own
environment).  Each run loads the file, processes a ``--prompt``-token prompt
(prompt tokens/s), then a 32-token prompt and ``--decode`` greedy steps (decode
tokens/s); its peak resident memory is the process's ``ru_maxrss``.  Medians
over the repeats are reported.  ``--busy`` runs one CPU-bound process alongside
every measurement (the host is then oversubscribed by one thread).

Each format's decode speed is also given as a share of its memory-bandwidth
floor: a third kind of run in the rotation (:mod:`tallow.bench.stream`) reads
as many bytes as a decode step's weights with the same thread count, and the
floor is that read's speed in tokens/s; the same share in CPU time (the read's
over a decode step's, all threads counted) is given beside it, as a check on a
machine that other work shares.

``--shape`` picks the model: ``135m`` (the default), a random Llama with
SmolLM2-135M's shape (hidden 576, 30 layers, 9/3 heads, vocabulary 49152, tied
embeddings), or ``1b``, TinyLlama-1.1B's (hidden 2048, 22 layers, 32/4 heads,
FFN 5632, vocabulary 32000, tied embeddings), whose default formats are the
popular ones: Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q4_0 and IQ4_XS.  ``--make-models``
writes the files when they are missing: the random model as F32, then for the
135M shape F16 / Q8_0 / Q4_0 copies made by tallow's quantizer (the token
embedding as Q8_0 in the quantized files, as llama.cpp's quantizer stores it
for this shape); every other format, and every format of the 1B shape, is made
by llama.cpp's own quantizer through ``--llama-python``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from .common import busy_process, table, write_json

FORMATS = ("F32", "F16", "Q8_0", "Q4_0", "Q4_K_M")
SMOLLM2_SHAPE = dict(vocab=49152, hidden=576, layers=30, heads=9, kv_heads=3, ffn=1536, ctx=8192,
                     rope_theta=100000.0, eps=1e-5)
TINYLLAMA_SHAPE = dict(vocab=32000, hidden=2048, layers=22, heads=32, kv_heads=4, ffn=5632, ctx=8192,
                       rope_theta=100000.0, eps=1e-5)
# --shape: the model's shape, its default formats and its default repeats (a 1B run
# takes about a minute per format, thread count and implementation)
SHAPES = {"135m": (SMOLLM2_SHAPE, FORMATS, 3),
          "1b": (TINYLLAMA_SHAPE, ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "IQ4_XS"), 2)}
TALLOW_MADE = ("F16", "Q8_0", "Q4_0")  # the 135M shape's copies made by tallow's quantizer


# ------------------------------------------------------------------- model files
def make_random_llama(path: str, shape: dict = SMOLLM2_SHAPE, seed: int = 1234) -> None:
    """A random Llama GGUF (F32, llama.cpp's names and metadata, a dummy SentencePiece vocabulary)."""
    from ..ggml.gguf_io import write_gguf

    rng = np.random.default_rng(seed)
    h, f, d = shape["hidden"], shape["ffn"], shape["hidden"] // shape["heads"]
    q, kv = shape["heads"] * d, shape["kv_heads"] * d

    def w(n, k):
        return (rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    tensors = {"token_embd.weight": w(shape["vocab"], h)}
    for i in range(shape["layers"]):
        p = f"blk.{i}"
        tensors.update({f"{p}.attn_norm.weight": np.ones(h, np.float32), f"{p}.attn_q.weight": w(q, h),
                        f"{p}.attn_k.weight": w(kv, h), f"{p}.attn_v.weight": w(kv, h),
                        f"{p}.attn_output.weight": w(h, q), f"{p}.ffn_norm.weight": np.ones(h, np.float32),
                        f"{p}.ffn_gate.weight": w(f, h), f"{p}.ffn_up.weight": w(f, h),
                        f"{p}.ffn_down.weight": w(h, f)})
    tensors["output_norm.weight"] = np.ones(h, np.float32)
    vocab = shape["vocab"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"tok{i}" for i in range(len(tokens), vocab)]
    meta = {
        "general.architecture": "llama", "general.name": "random-llama", "general.file_type": 0,
        "llama.context_length": shape["ctx"], "llama.embedding_length": h, "llama.block_count": shape["layers"],
        "llama.feed_forward_length": f, "llama.attention.head_count": shape["heads"],
        "llama.attention.head_count_kv": shape["kv_heads"],
        "llama.attention.layer_norm_rms_epsilon": float(shape["eps"]),
        "llama.rope.freq_base": float(shape["rope_theta"]), "llama.rope.dimension_count": d,
        "llama.vocab_size": vocab, "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * vocab,
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * (vocab - 259),
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False,
    }
    write_gguf(path, tensors, meta)


def quantize_file(src: str, dst: str, fmt: str) -> None:
    """A copy of a float GGUF Llama with its 2-D weights as ``fmt`` (the embedding Q8_0 when quantized)."""
    from ..ggml.gguf_io import read_gguf, write_gguf
    from ..ggml.types import ggml_type

    f = read_gguf(src)
    target = ggml_type(fmt)
    out = {}
    for name, t in f.tensors.items():
        if len(t.shape) != 2:
            out[name] = t
            continue
        kind = ggml_type("Q8_0") if name == "token_embd.weight" and not target.is_float else target
        x = t.dequantize().astype(np.float32)
        if kind.name == "F16":
            out[name] = x.astype(np.float16)
        elif kind.name == "F32":
            out[name] = x
        else:
            out[name] = (kind.quantize(x).reshape(-1), t.shape, kind)
    write_gguf(dst, out, f.metadata)


# Run by --llama-python's interpreter: llama.cpp's quantizer, as its llama-quantize tool.
_LLAMA_QUANTIZE = """
import ctypes, os, sys
import llama_cpp
src, dst, ftype = sys.argv[1:4]
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype)
p.nthread = os.cpu_count() or 1
sys.exit(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)))
"""


def llama_quantize(python: str, src: str, dst: str, fmt: str) -> None:
    """``dst``: the F32 GGUF ``src`` quantized to ``fmt`` (Q4_K_M, IQ4_XS, ...) by llama.cpp."""
    part = dst + ".part"
    done = subprocess.run([python, "-c", _LLAMA_QUANTIZE, src, part, fmt], capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(part):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"llama.cpp's quantizer could not write {fmt} (exit {done.returncode}): {tail}")
    os.replace(part, dst)


def ensure_models(folder: str, formats, make: bool, quiet: bool = False, shape: str = "135m",
                  llama_python: str | None = None) -> dict:
    """{format: path} of the files present (made first with ``make``: see the module doc)."""
    os.makedirs(folder, exist_ok=True)
    f32 = os.path.join(folder, "model-F32.gguf")
    paths = {fmt: os.path.join(folder, f"model-{fmt}.gguf") for fmt in formats}
    by_tallow = TALLOW_MADE if shape == "135m" else ()
    makeable = [f for f, p in paths.items() if not os.path.exists(p) and (f in by_tallow or llama_python)]
    if make and makeable and not os.path.exists(f32):
        if not quiet:
            print(f"  writing {f32}", flush=True)
        make_random_llama(f32, SHAPES[shape][0])
    found = {}
    for fmt, path in paths.items():
        if make and fmt in makeable and fmt != "F32":
            if not quiet:
                print(f"  writing {path}", flush=True)
            if fmt in by_tallow:
                quantize_file(f32, path, fmt)
            else:
                llama_quantize(llama_python, f32, path, fmt)
        if os.path.exists(path):
            found[fmt] = path
    return found


# ------------------------------------------------------------------- measuring
def run_worker(impl: str, path: str, threads: int, prompt: int, decode: int, python: str) -> dict:
    """One measurement in a fresh process; adds ``peak_rss_mib`` (or ``error``)."""
    env = dict(os.environ)
    if impl in ("tallow", "stream"):
        cmd = [sys.executable, "-m", "tallow.bench.llm_worker"]
        env["TALLOW_NUM_THREADS"] = str(threads)
    else:  # another environment: run a copy of the worker away from tallow's sources
        scratch = tempfile.mkdtemp(prefix="tallow-llm-")
        script = os.path.join(scratch, "llm_worker.py")
        shutil.copy(os.path.join(os.path.dirname(__file__), "llm_worker.py"), script)
        cmd = [python, script]
    cmd += [impl, path, str(threads), str(prompt), str(decode)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if impl not in ("tallow", "stream"):
        shutil.rmtree(scratch, ignore_errors=True)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": f"exit {p.returncode}: {err.strip().splitlines()[-1] if err.strip() else 'no output'}"}
    result = json.loads(lines[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024.0  # kilobytes on Linux
    return result


def bench_llm(files: dict, threads=(1, 2), impls=("tallow",), repeats: int = 3, prompt: int = 512,
              decode: int = 128, python: str | None = None, busy: bool = False, quiet: bool = False) -> dict:
    """{format: {threads: {impl: {decode_tps, prompt_tps, peak_rss_mib, runs}}}}, medians of alternating runs
    (impl ``stream``: {read_gbps, weight_bytes}, the bandwidth floor)."""
    runs: dict = {}
    hog = busy_process() if busy else None
    try:
        for r in range(repeats):
            for fmt, path in files.items():
                for t in threads:
                    order = list(impls[r % len(impls):]) + list(impls[: r % len(impls)])
                    for impl in order:
                        res = run_worker(impl, path, t, prompt, decode, python)
                        runs.setdefault(fmt, {}).setdefault(t, {}).setdefault(impl, []).append(res)
                        if not quiet and impl == "stream" and "error" not in res:
                            print(f"  [{r + 1}/{repeats}] {fmt} {t} thread(s) streaming read: "
                                  f"{res['read_gbps']:.1f} GB/s of {res['weight_bytes'] / 1e6:.0f} MB "
                                  f"({1e3 * res['read_cpu_s']:.2f} CPU ms)", flush=True)
                        elif not quiet:
                            msg = res.get("error") or (f"decode {res['decode_tps']:.1f} tok/s "
                                                        f"({res.get('decode_cpu_ms', float('nan')):.2f} CPU ms/token), prompt "
                                                        f"{res['prompt_tps']:.1f} tok/s, peak {res['peak_rss_mib']:.0f} MiB")
                            print(f"  [{r + 1}/{repeats}] {fmt} {t} thread(s) {impl}: {msg}", flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    out: dict = {}
    for fmt, by_t in runs.items():
        for t, by_impl in by_t.items():
            for impl, rs in by_impl.items():
                ok = [x for x in rs if "error" not in x]
                entry = {"runs": rs}
                if ok:
                    for key in ("decode_tps", "prompt_tps", "peak_rss_mib", "load_s", "decode_cpu_ms", "prompt_cpu_ms",
                                "read_gbps", "read_cpu_s", "weight_bytes"):
                        if all(key in x for x in ok):
                            entry[key] = statistics.median(x[key] for x in ok)
                    entry["first_tokens"] = ok[0].get("first_tokens")
                out.setdefault(fmt, {}).setdefault(t, {})[impl] = entry
    return out


def _ratio(a, b):
    return None if a is None or b is None or not b else a / b


def floor_tps(by_impl: dict):
    """The bandwidth floor's tokens/s: the streaming read's speed over a step's weight bytes."""
    st = by_impl.get("stream", {})
    if st.get("read_gbps") is None or not st.get("weight_bytes"):
        return None
    return st["read_gbps"] * 1e9 / st["weight_bytes"]


def cpu_share(by_impl: dict, impl: str):
    """Decode's share of the floor in CPU time: the streaming read's CPU time over a decode
    step's (all threads of each), a figure that other work on the cores disturbs less."""
    read_cpu, step_ms = by_impl.get("stream", {}).get("read_cpu_s"), by_impl.get(impl, {}).get("decode_cpu_ms")
    return None if read_cpu is None or not step_ms else 1e3 * read_cpu / step_ms


def tables(res: dict, threads, impls, shape: str = "135m") -> str:
    """One table per thread count: per format decode and prompt tokens/s, decode as a share
    of the bandwidth floor, peak memory."""
    both = len(impls) > 1
    names = " / ".join(impls)
    out = []
    for t in threads:
        head = ["file", f"decode {names}"] + (["x"] if both else []) + [f"prompt {names}"] + (["x"] if both else [])
        head += ["floor tok/s", f"decode / floor {names}", f"in CPU time {names}", f"peak MiB {names}"]
        head += ["x"] if both else []
        rows = []
        for fmt, by_t in res.items():
            by_impl = by_t.get(t, {})
            row = [fmt]
            for key in ("decode_tps", "prompt_tps"):
                vals = [by_impl.get(i, {}).get(key) for i in impls]
                row.append(" / ".join("-" if v is None else f"{v:.1f}" for v in vals))
                if both:
                    row.append(_ratio(vals[0], vals[1]))
            floor = floor_tps(by_impl)
            row.append(floor)
            shares = [_ratio(by_impl.get(i, {}).get("decode_tps"), floor) for i in impls]
            row.append(" / ".join("-" if v is None else f"{v:.2f}" for v in shares))
            row.append(" / ".join("-" if v is None else f"{v:.2f}" for v in (cpu_share(by_impl, i) for i in impls)))
            vals = [by_impl.get(i, {}).get("peak_rss_mib") for i in impls]
            row.append(" / ".join("-" if v is None else f"{v:.0f}" for v in vals))
            if both:
                row.append(_ratio(vals[0], vals[1]))
            rows.append(row)
        out.append(table(f"{shape} shape, {t} thread{'s' if t > 1 else ''}: tokens/s (median of alternating runs; "
                         "x = tallow / llama.cpp), decode as a share of the bandwidth floor, peak resident memory",
                         head, rows))
    return "\n\n".join(out)


def run(args) -> int:
    shape = getattr(args, "shape", None) or "135m"
    _, default_formats, default_repeats = SHAPES[shape]
    folder = getattr(args, "models", None) or os.environ.get("LLM_BENCH_MODELS", "llm-bench-models")
    formats = getattr(args, "formats", None) or default_formats
    if isinstance(formats, str):
        formats = tuple(x.strip() for x in formats.split(",") if x.strip())
    python = getattr(args, "llama_python", None)
    files = ensure_models(folder, formats, bool(getattr(args, "make_models", False)), shape=shape,
                          llama_python=python)
    if not files:
        print(f"  no model files in {folder} (model-<FORMAT>.gguf); --make-models writes them")
        return 1
    threads = tuple(getattr(args, "threads", None) or (1, 2))
    impls = ("tallow", "llama.cpp") if python else ("tallow",)
    repeats = args.repeats or (1 if args.quick else default_repeats)
    prompt = 64 if args.quick else 512
    decode = 32 if args.quick else 128
    busy = bool(getattr(args, "busy", False))
    print(f"  {shape} shape; files: {', '.join(files)}; threads {threads}; {repeats} alternating repeat(s); "
          f"prompt {prompt}, decode {decode} tokens{'; one competing CPU-bound process' if busy else ''}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    res = bench_llm(files, threads, impls + ("stream",), repeats, prompt, decode, python, busy)
    print(f"  load average at the end {os.getloadavg()[0]:.2f} (other processes' runnable tasks: "
          f"the 2-thread figures of a busy machine measure its load)")
    print()
    print(tables(res, threads, impls, shape))
    if args.json:
        # the 135M shape's runs are recorded as the suite "llm", the others' beside them
        extra = {} if shape == "135m" else {"suite": f"llm-{shape}", "command": f"llm --shape {shape}"}
        write_json(args.json, {"conditions": {"shape": shape, "threads": threads, "repeats": repeats,
                                              "prompt": prompt, "decode": decode, "busy": busy,
                                              "cpus": os.cpu_count()},
                               "results": {f: {str(t): v for t, v in by_t.items()} for f, by_t in res.items()},
                               **extra})
    return 0
