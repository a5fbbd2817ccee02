"""One measurement of ``tallow bench llm``, run as its own process (for its peak memory).

    python llm_worker.py IMPL FILE.gguf THREADS PROMPT DECODE

IMPL is ``tallow`` or ``llama.cpp`` (llama-cpp-python, possibly from another
Python environment: this file imports tallow only for IMPL tallow).  Both
sides do the same: load; warm up (8 prompt tokens, 4 steps); a PROMPT-token
prompt from position 0 (prompt tokens/s); then a 32-token prompt and DECODE
greedy steps (decode tokens/s).  IMPL ``stream`` instead measures the decode
step's memory-bandwidth floor on THREADS threads (:mod:`tallow.bench.stream`:
the bytes a step reads and the speed of streaming that many).  Prints one JSON
line.
"""

import json
import os
import sys
import time

import numpy as np


def token_ids(vocab: int, count: int, seed: int) -> list:
    return [int(x) for x in np.random.default_rng(seed).integers(3, vocab, count)]


def tallow_runner(path: str, threads: int):
    import tallow as tl
    from tallow.models.gguf_models import load_gguf_model

    tl.utils.set_num_threads(threads)
    model = load_gguf_model(path)  # a Llama's ModelWeights, or another family's decoder
    state = {}

    def reset():
        state["cache"] = model.new_cache()
        state["pos"] = 0

    def feed(ids):
        logits = model.forward(tl.Tensor([ids], dtype="u32"), state["pos"], state["cache"])
        state["pos"] += len(ids)
        return logits

    def argmax(logits):
        return int(logits.numpy().argmax())

    return model.config.vocab_size, reset, feed, argmax


def llama_cpp_runner(path: str, threads: int):
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, logits_all=False, verbose=False)
    nv = llm.n_vocab()

    def feed(ids):
        llm.eval(ids)

    def argmax(_):
        return int(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(nv,)).argmax())

    return nv, llm.reset, feed, argmax


def stream_floor(path: str, threads: int) -> dict:
    from tallow.bench.stream import read_bandwidth, weight_bytes_per_token

    nbytes = weight_bytes_per_token(path)
    return dict(impl="stream", file=os.path.basename(path), threads=threads, weight_bytes=nbytes,
                **read_bandwidth(nbytes, threads))


def main(argv):
    impl, path, threads, prompt, decode = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    if impl == "stream":
        print(json.dumps(stream_floor(path, threads)))
        return 0
    t0 = time.perf_counter()
    vocab, reset, feed, argmax = (tallow_runner if impl == "tallow" else llama_cpp_runner)(path, threads)
    load = time.perf_counter() - t0

    def generate(ids, steps):
        reset()
        t0, c0 = time.perf_counter(), time.process_time()
        logits = feed(ids)
        tp = time.perf_counter() - t0
        state_cpu["prompt"] = time.process_time() - c0
        toks = []
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            tok = argmax(logits)
            toks.append(tok)
            logits = feed([tok])
        state_cpu["decode"] = time.process_time() - c0  # all of the process's threads
        return tp, time.perf_counter() - t0, toks

    state_cpu = {}

    generate(token_ids(vocab, 8, 2), 4)  # warm-up
    pp, _, _ = generate(token_ids(vocab, prompt, 1), 0)
    prompt_cpu = state_cpu["prompt"]  # (the next call's 32-token prompt overwrites it)
    _, td, toks = generate(token_ids(vocab, 32, 0), decode)
    print(json.dumps(dict(impl=impl, file=os.path.basename(path), threads=threads, load_s=load,
                          prompt_tps=prompt / pp, decode_tps=decode / td,
                          decode_cpu_ms=1e3 * state_cpu["decode"] / max(decode, 1),
                          prompt_cpu_ms=1e3 * prompt_cpu / max(prompt, 1), first_tokens=toks[:8])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
