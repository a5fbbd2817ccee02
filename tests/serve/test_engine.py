"""The generation engine on its own: the batched step against the one-at-a-time path,
stop strings against OpenAI's rule, cancelled sequences."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from tallow.serve.sequence import StopText

PROMPTS = ["What are the three primary colors?", "Name a large animal.", "Say hello in French.",
           "What is 2 + 2?", "Write a haiku about rain."]


@pytest.fixture(scope="module")
def decoder(smollm2_gguf):
    from tallow.models.generate import TextGenerator
    from tallow.serve.models import load_decoder

    path, model, tokenizer, chat_prompt = load_decoder(smollm2_gguf)
    eos = TextGenerator(model, tokenizer, temperature=0).eos_token_ids
    return model, tokenizer, chat_prompt, eos


def run_all(decoder, batched: bool, max_tokens=20, max_batch=8):
    from tallow.serve.engine import DecoderRunner, GenerationEngine
    from tallow.serve.sequence import SamplingParams, Sequence

    model, tokenizer, chat_prompt, eos = decoder
    runner = DecoderRunner(model, 512, batched=batched)
    engine = GenerationEngine("m", runner, max_batch=max_batch, max_queue=16)
    texts, finished = {}, threading.Semaphore(0)

    def deliver_to(i):
        def deliver(ev):
            assert ev.error is None, ev.error
            texts[i] = texts.get(i, "") + ev.text
            if ev.finish_reason:
                finished.release()
        return deliver

    try:
        for i, p in enumerate(PROMPTS):
            ids = tokenizer.encode(chat_prompt([{"role": "user", "content": p}])).ids
            engine.submit(Sequence(ids, SamplingParams(max_tokens=max_tokens, temperature=0), tokenizer, eos,
                                   deliver_to(i)))
        for _ in PROMPTS:
            assert finished.acquire(timeout=120)
    finally:
        engine.close()
    return [texts[i] for i in range(len(PROMPTS))], runner


@pytest.mark.slow
def test_the_batched_step_gives_the_single_paths_greedy_answers(decoder):
    batched, runner = run_all(decoder, batched=True)
    assert runner.batched  # the model has step_batch: the test compares two paths
    single, runner = run_all(decoder, batched=False)
    assert not runner.batched
    assert batched == single
    # and one at a time (max_batch 1: every step holds one sequence)
    assert run_all(decoder, batched=True, max_batch=1)[0] == single


def test_a_cancelled_sequence_leaves_at_the_next_step_and_frees_its_cache(decoder):
    from tallow.serve.engine import DecoderRunner, GenerationEngine
    from tallow.serve.sequence import SamplingParams, Sequence

    model, tokenizer, chat_prompt, eos = decoder
    engine = GenerationEngine("m", DecoderRunner(model, 512), max_batch=2, max_queue=2)
    started = threading.Event()
    seq = Sequence(tokenizer.encode("Count: 1, 2, 3,").ids, SamplingParams(max_tokens=400, temperature=0),
                   tokenizer, set(), lambda ev: started.set())
    try:
        engine.submit(seq)
        assert started.wait(60)
        cache = seq.cache
        engine.cancel(seq)
        for _ in range(500):
            if engine.counts() == (0, 0):
                break
            threading.Event().wait(0.01)
        assert engine.counts() == (0, 0)
        assert len(seq.generated) < 400 and seq.cache is None and cache.released
    finally:
        engine.close()


def openai_cut(pieces, stops) -> tuple[str, bool]:
    """OpenAI's rule: generation ends at the first token after which the text holds a
    stop string, and the answer is the text before the first one it holds."""
    text = ""
    for p in pieces:
        text += p
        hits = [i for i in (text.find(s) for s in stops) if i >= 0]
        if hits:
            return text[:min(hits)], True
    return text, False


@hsettings(max_examples=500, deadline=None)
@given(pieces=st.lists(st.text(alphabet="ab c.", max_size=4), max_size=12),
       stops=st.lists(st.text(alphabet="ab c.", min_size=1, max_size=3), min_size=1, max_size=4))
def test_stop_text_releases_what_openai_returns(pieces, stops):
    stop = StopText(stops)
    out, hit = [], False
    for p in pieces:
        text, hit = stop.feed(p)
        out.append(text)
        if hit:
            break
    if not hit:
        out.append(stop.flush())
    assert ("".join(out), hit) == openai_cut(pieces, stops)


@pytest.mark.parametrize("text", ["🎉", "你好"])
def test_an_answer_cut_inside_a_character_leaves_it_out(decoder, text):
    """Byte tokens of one character (SmolLM2 spells an emoji in three): an answer that
    ends after some of them ends before the character, never with U+FFFD; one that ends
    after all of them has it whole, as the tokenizer decodes it."""
    import numpy as np

    from tallow.serve.sequence import SamplingParams, Sequence

    model, tokenizer, chat_prompt, eos = decoder
    ids = tokenizer.encode(text).ids
    assert len(ids) > 1 and tokenizer.decode(ids) == text
    for n in range(1, len(ids) + 1):
        events = []
        seq = Sequence([1], SamplingParams(max_tokens=n, temperature=0), tokenizer, eos, events.append)
        for t in ids[:n]:  # logits that make greedy sampling take the token
            seq.logits = np.where(np.arange(model.config.vocab_size) == t, 1.0, 0.0)
            seq.take_logits(limit=100)
        got = "".join(e.text for e in events)
        assert events[-1].finish_reason == "length"
        whole = tokenizer.decode(ids[:n])
        assert got == whole.rstrip("\ufffd") and "\ufffd" not in got
        # every character the prefix completes is kept (你 of 你好 needs its first 2 tokens)
        assert got == "".join(ch for ch in text if ch in whole)
