"""``tallow generate``: text generation with a Llama-family model (safetensors or GGUF)."""

from __future__ import annotations

import os
import sys

import tallow as tl

from .args import positive_int, reported_errors


def _find(path, names, what):
    if os.path.isdir(path):
        for n in names:
            p = os.path.join(path, n)
            if os.path.exists(p):
                return p
        raise FileNotFoundError(f"{what}: {path} has none of {', '.join(names)}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: no such file: {path}")
    return path


def _generate(args) -> int:
    # the models load with their command
    from tallow.models.llama import Llama, LlamaConfig
    from tallow.models.sentence import load_tokenizer

    model_path = args.model
    if os.path.isfile(model_path) and _is_gguf(model_path):
        from tallow.models.quantized_llama import ModelWeights

        tok_path = _find(args.tokenizer or os.path.dirname(model_path), ["tokenizer.json"], "--tokenizer")
        model = ModelWeights.from_gguf(model_path, tl.Device.parse(args.device))
        return _stream(args, model, load_tokenizer(tok_path))
    if os.path.isdir(model_path):
        weights = sorted(os.path.join(model_path, f) for f in os.listdir(model_path)
                         if f.endswith(".safetensors"))
        if not weights:
            raise FileNotFoundError(f"--model: {model_path} has no .safetensors files")
        config_path = os.path.join(model_path, "config.json")
    else:
        if not os.path.exists(model_path):
            raise FileNotFoundError(f"--model: no such file: {model_path}")
        weights = [model_path]
        config_path = args.config or os.path.join(os.path.dirname(model_path), "config.json")
    if args.config:
        config_path = args.config
    tok_path = _find(args.tokenizer or (model_path if os.path.isdir(model_path)
                                        else os.path.dirname(model_path)),
                     ["tokenizer.json"], "--tokenizer")
    cfg = LlamaConfig.from_json(config_path)
    device = tl.Device.parse(args.device)
    dtype = tl.DType.parse(args.dtype)
    vb = tl.nn.VarBuilder.from_safetensors(weights, dtype=dtype, device=device)
    model = Llama.load(vb, cfg)
    return _stream(args, model, load_tokenizer(tok_path))


def _is_gguf(path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _stream(args, model, tokenizer) -> int:
    from tallow.models.generate import TextGenerator

    gen = TextGenerator(model, tokenizer, temperature=args.temperature, top_p=args.top_p,
                        top_k=args.top_k, seed=args.seed, repeat_penalty=args.repeat_penalty,
                        repeat_last_n=args.repeat_last_n)
    result = []
    pieces = gen.stream(args.prompt, args.max_tokens, result)
    first = next(pieces, None)  # a bad prompt raises here, before anything is printed
    sys.stdout.write(args.prompt)
    for piece in ([first] if first else []) + [None]:
        if piece:
            sys.stdout.write(piece)
        sys.stdout.flush()
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    r = result[0]
    print(f"{len(r.token_ids)} tokens ({r.finish_reason}), {r.tokens_per_second:.1f} tokens/s",
          file=sys.stderr)
    return 0


def add_generate_parser(sub) -> None:
    g = sub.add_parser("generate", help="text generation with a Llama-family model")
    g.add_argument("--model", required=True, metavar="PATH",
                   help="a model directory (config.json + *.safetensors), a .safetensors file, "
                        "or a llama.cpp GGUF file (quantized Llama)")
    g.add_argument("--tokenizer", metavar="PATH", default=None,
                   help="tokenizer.json (default: next to the model)")
    g.add_argument("--config", metavar="PATH", default=None,
                   help="config.json (default: next to the model)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-tokens", type=positive_int, default=100)
    g.add_argument("--temperature", type=float, default=0.8,
                   help="0 for greedy decoding (default 0.8)")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--seed", type=int, default=299792458)
    g.add_argument("--repeat-penalty", type=float, default=1.1)
    g.add_argument("--repeat-last-n", type=int, default=64)
    g.add_argument("--device", default="cpu")
    g.add_argument("--dtype", default="f32", help="weights dtype (safetensors models; GGUF runs in f32)")
    g.set_defaults(run=reported_errors(_generate))
