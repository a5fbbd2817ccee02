"""Every decoder family against llama.cpp, on GGUF files written by llama.cpp itself.

For each family a small random model is made by transformers (with a SentencePiece
tokenizer, which the converter needs), converted by llama.cpp's own
``convert_hf_to_gguf.py`` to F32 and F16, quantized by llama.cpp's quantizer to Q8_0
and Q4_K_M, and run by the llama-cpp-python wheel and by tallow on the same token
ids: a 32-token prompt, then 16 single-token steps on the cache. The figures per
family and format: the relative L2 error of tallow's logits against llama.cpp's
(its cache in f32), the difference llama.cpp's own f16 cache makes on the same file,
and the share of positions whose argmax agrees.

What it needs, found through environment variables:

- ``TALLOW_LLAMA_CPP_PYTHON``: a Python with llama-cpp-python (default
  ``/tmp/llamavenv/bin/python``);
- ``TALLOW_LLAMA_CPP_CONVERTER``: llama.cpp's ``convert_hf_to_gguf.py``, with its
  ``conversion/`` and ``gguf-py/`` folders beside it (default: the copy ``--fetch``
  unpacks into tallow's cache from the llama-cpp-python sdist, which vendors the
  llama.cpp commit its wheel is built from).

Run as a script it prints the table of figures (``--fetch`` first gets the converter):

    .venv/bin/python tests/support/llama_cpp_families.py [--fetch] [--json OUT]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_PYTHON = os.environ.get("TALLOW_LLAMA_CPP_PYTHON", "/tmp/llamavenv/bin/python")


def _cache_dir() -> Path:
    from tallow.models.packaged import cache_dir

    return Path(cache_dir())


def converter_path() -> Path:
    env = os.environ.get("TALLOW_LLAMA_CPP_CONVERTER")
    if env:
        return Path(env)
    return _cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}" / "convert_hf_to_gguf.py"


def fetch_converter() -> Path:
    """Unpack convert_hf_to_gguf.py, conversion/ and gguf-py/ from the sdist of the
    llama-cpp-python release the comparison wheel is built from."""
    import tarfile

    dest = converter_path().parent
    if (dest / "convert_hf_to_gguf.py").exists():
        return dest / "convert_hf_to_gguf.py"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", tmp],
                       check=True)
        (sdist,) = Path(tmp).glob("*.tar.gz")
        prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)
                       and m.name[len(prefix):].startswith(wanted)]
            for m in members:
                m.name = m.name[len(prefix):]
            tar.extractall(dest, members=members, filter="data")
    return dest / "convert_hf_to_gguf.py"


def available() -> str | None:
    """Why the comparison cannot run here, or None when it can."""
    if not os.path.exists(LLAMA_PYTHON):
        return f"no llama-cpp-python environment at {LLAMA_PYTHON} (TALLOW_LLAMA_CPP_PYTHON)"
    if not converter_path().exists():
        return (f"no llama.cpp converter at {converter_path()} (TALLOW_LLAMA_CPP_CONVERTER, or "
                "`python tests/support/llama_cpp_families.py --fetch`)")
    return None


# -- the random models ---------------------------------------------------------------------

# hidden and MLP sizes multiples of 256, so the K-quants apply to every projection
SMALL = dict(vocab_size=384, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
             rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
PROMPT = [(7 * i + 3) % 360 + 4 for i in range(32)]
STEPS = [(11 * i + 5) % 360 + 4 for i in range(16)]
# llama.cpp's context (it rounds a context up to a multiple of 256), Phi-3's original
# one: llama.cpp picks the short LongRoPE factors for a context up to it, as tallow
# does for the positions below it
N_CTX = 256


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(**SMALL, rope_theta=50000.0))


def _mistral():
    from transformers import MistralConfig, MistralForCausalLM
    # llama.cpp runs Mistral as Llama, without a window: one longer than the context
    return MistralForCausalLM(MistralConfig(**SMALL, sliding_window=128))


def _qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return Qwen2ForCausalLM(Qwen2Config(**{**SMALL, "tie_word_embeddings": True}))


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    return Qwen3ForCausalLM(Qwen3Config(**SMALL, head_dim=64))


def _gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    # six layers: five sliding (a window shorter than the prompt), one global, as
    # llama.cpp fixes them; scores by head_dim ** -0.5 as llama.cpp does
    return Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "tie_word_embeddings": True, "num_hidden_layers": 6, "head_dim": 64,
        "query_pre_attn_scalar": 64, "sliding_window": 12,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}))


def _phi3():
    from transformers import Phi3Config, Phi3ForCausalLM
    half = SMALL["hidden_size"] // SMALL["num_attention_heads"] // 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0 + 0.05 * i for i in range(half)],
            "long_factor": [1.0 + 0.5 * i for i in range(half)],
            "original_max_position_embeddings": N_CTX}
    return Phi3ForCausalLM(Phi3Config(**{**SMALL, "rope_parameters": rope,
                                         "max_position_embeddings": 4 * N_CTX,
                                         "original_max_position_embeddings": N_CTX,
                                         "pad_token_id": 0}))


FAMILIES = {"llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3,
            "gemma3": _gemma3, "phi3": _phi3}
FORMATS = ("F32", "F16", "Q8_0", "Q4_K_M")

CORPUS = ("the quick brown fox jumps over the lazy dog. tensors and kernels run on devices. "
          "small models generate text one token at a time. a cache keeps the keys and values. "
          "every family of decoders is checked against the converter and the quantizer.")


def write_sentencepiece(d: Path) -> None:
    """A small SentencePiece BPE model as ``tokenizer.model`` (the converter pads the
    vocabulary to the config's size)."""
    import io

    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.split(". ") * 20), model_writer=out, vocab_size=120,
        model_type="bpe", hard_vocab_limit=False, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        minloglevel=3)
    (d / "tokenizer.model").write_bytes(out.getvalue())


def make_family(name: str, d: Path, seed: int = 3):
    """The random Hugging Face model of ``name`` saved in ``d``; returns the model."""
    import torch

    torch.manual_seed(seed)
    hf = FAMILIES[name]()
    hf.eval()
    with torch.no_grad():
        # biases and norms would otherwise start at 0 and 1 (transformers' init)
        for pname, p in hf.named_parameters():
            if pname.endswith(".bias") or "norm" in pname:
                p.add_(torch.randn_like(p) * 0.1)
    d.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(d)
    write_sentencepiece(d)
    return hf


# -- llama.cpp's converter, quantizer and logits --------------------------------------------

_QUANTIZE = r"""
import sys
import llama_cpp
src, dst, ftype = sys.argv[1], sys.argv[2], getattr(llama_cpp, sys.argv[3])
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = ftype
params.nthread = 1
rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
sys.exit(rc)
"""

_LOGITS = r"""
import json, sys
import numpy as np
import llama_cpp
path, prompt, steps, n_ctx, out = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
res = {}
for kv, t in (("f32", llama_cpp.GGML_TYPE_F32), ("f16", llama_cpp.GGML_TYPE_F16)):
    m = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True,
                        verbose=False, type_k=t, type_v=t, n_threads=1)
    m.eval(prompt)
    for tok in steps:
        m.eval([tok])
    res[kv] = np.array(m.scores[:len(prompt) + len(steps)], dtype=np.float32)
np.savez(out, **res)
"""

_FTYPES = {"Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}


def convert(hf_dir: Path, out: Path, outtype: str) -> Path:
    """llama.cpp's convert_hf_to_gguf.py on ``hf_dir`` (outtype f32 or f16)."""
    subprocess.run([sys.executable, str(converter_path()), str(hf_dir), "--outfile", str(out),
                    "--outtype", outtype], check=True, capture_output=True, timeout=600)
    return out


def quantize(src: Path, dst: Path, fmt: str) -> Path:
    """llama.cpp's quantizer (``llama_model_quantize``) from ``src`` to ``fmt``."""
    r = subprocess.run([LLAMA_PYTHON, "-c", _QUANTIZE, str(src), str(dst), _FTYPES[fmt]],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"llama.cpp's quantizer failed on {src} -> {fmt}: {r.stderr[-2000:]}")
    return dst


def llama_cpp_logits(path: Path, prompt=PROMPT, steps=STEPS, n_ctx=N_CTX) -> dict:
    """llama.cpp's logits (positions, vocab) with an f32 and an f16 cache."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ref.npz"
        r = subprocess.run([LLAMA_PYTHON, "-c", _LOGITS, str(path), json.dumps(prompt),
                            json.dumps(steps), str(n_ctx), str(out)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"llama.cpp failed on {path}: {r.stderr[-2000:]}")
        ref = np.load(out)
        return {k: ref[k] for k in ref.files}


def tallow_logits(path: Path, prompt=PROMPT, steps=STEPS, device="cpu") -> np.ndarray:
    """tallow's logits (positions, vocab) for the prompt and then each cached step."""
    import tallow as tl
    from tallow.models.gguf_models import load_gguf_model

    model = load_gguf_model(str(path), device)
    cache = model.new_cache()
    rows = [model.logits(tl.Tensor([prompt], dtype="u32", device=device), 0, cache).numpy()[0]]
    pos = len(prompt)
    for tok in steps:
        rows.append(model.forward(tl.Tensor([[tok]], dtype="u32", device=device), pos,
                                  cache).numpy())
        pos += 1
    return np.concatenate(rows, axis=0)


def rel_l2(x, y) -> float:
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


def compare(path: Path) -> dict:
    """The figures of one file: tallow vs llama.cpp (f32 cache), llama.cpp's f16 cache
    vs its f32 one, and the argmax agreement."""
    ref = llama_cpp_logits(path)
    ours = tallow_logits(path)
    return {"rel_l2": rel_l2(ours, ref["f32"]), "llama_kv_f16_rel_l2": rel_l2(ref["f16"], ref["f32"]),
            "argmax_agree": float(np.mean(ours.argmax(-1) == ref["f32"].argmax(-1)))}


def family_files(name: str, root: Path, formats=FORMATS) -> dict:
    """``{format: path}``: the family's model converted and quantized by llama.cpp."""
    hf_dir = root / name / "hf"
    if not (hf_dir / "config.json").exists():
        make_family(name, hf_dir)
    files = {}
    for fmt in formats:
        path = root / name / f"{name}-{fmt}.gguf"
        if not path.exists():
            if fmt in ("F32", "F16"):
                convert(hf_dir, path, fmt.lower())
            else:
                f32 = root / name / f"{name}-F32.gguf"
                if not f32.exists():
                    convert(hf_dir, f32, "f32")
                quantize(f32, path, fmt)
        files[fmt] = path
    return files


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fetch", action="store_true", help="unpack llama.cpp's converter first")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--dir", help="keep the files here (default: a temporary folder)")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    if args.fetch:
        print("converter:", fetch_converter())
    why = available()
    if why:
        print(why, file=sys.stderr)
        return 2
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        print(f"{'family':8} {'format':7} {'rel L2':>9} {'llama f16 KV':>12} {'argmax':>7}")
        for name in args.families.split(","):
            for fmt, path in family_files(name, root, args.formats.split(",")).items():
                r = compare(path)
                results[f"{name}/{fmt}"] = r
                print(f"{name:8} {fmt:7} {r['rel_l2']:9.2e} {r['llama_kv_f16_rel_l2']:12.2e} "
                      f"{r['argmax_agree']:7.0%}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
