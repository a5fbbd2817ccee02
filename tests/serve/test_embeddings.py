"""POST /v1/embeddings through the openai client, against SentenceEmbedder.encode."""

from __future__ import annotations

import base64
import concurrent.futures
import threading

import numpy as np
import pytest
from support.serving import EMBED_MODEL

from tallow.models.sentence import SentenceEmbedder
from tallow.serve.embeddings import EmbeddingBatcher

TEXTS = ["tallow is a small tensor library", "candle is a minimalist ML framework",
         "The cat sat on the mat.", "Ünïcödé and emoji 🙂 survive the trip"]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    return SentenceEmbedder.from_pretrained(minilm_dir).encode(TEXTS)


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_list_and_string_inputs_equal_the_library(client, reference):
    out = client.embeddings.create(model=EMBED_MODEL, input=TEXTS)
    got = np.array([d.embedding for d in sorted(out.data, key=lambda d: d.index)])
    assert got.shape == reference.shape
    assert cosines(got, reference).min() >= 0.99999
    assert out.model == EMBED_MODEL and out.usage.prompt_tokens > len(TEXTS)
    one = client.embeddings.create(model=EMBED_MODEL, input=TEXTS[2])
    assert len(one.data) == 1 and cosines(one.data[0].embedding, reference[2]) >= 0.99999


def test_base64_decodes_to_the_same_floats(client, server):
    import httpx

    body = {"model": EMBED_MODEL, "input": TEXTS[:2]}
    floats = httpx.post(server.url + "/v1/embeddings", json=body).json()["data"]
    packed = httpx.post(server.url + "/v1/embeddings", json={**body, "encoding_format": "base64"}).json()["data"]
    for f, p in zip(floats, packed):
        decoded = np.frombuffer(base64.b64decode(p["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(f["embedding"], dtype=np.float32))
    # the openai client asks for base64 itself and decodes it
    via_client = client.embeddings.create(model=EMBED_MODEL, input=TEXTS[:2])
    np.testing.assert_allclose(np.array([d.embedding for d in via_client.data]),
                               np.array([f["embedding"] for f in floats]), rtol=0, atol=1e-7)


def test_dimensions_truncate_and_renormalise(client, reference):
    out = client.embeddings.create(model=EMBED_MODEL, input=TEXTS, dimensions=64)
    got = np.array([d.embedding for d in out.data])
    want = reference[:, :64] / np.linalg.norm(reference[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_dimensions_beyond_the_model_are_refused(client):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMBED_MODEL, input="x", dimensions=385)
    assert e.value.body["param"] == "dimensions"


def test_concurrent_requests_each_get_their_own_rows(client, reference):
    def one(i):
        out = client.embeddings.create(model=EMBED_MODEL, input=[TEXTS[i], TEXTS[(i + 1) % 4]])
        return i, np.array([d.embedding for d in out.data])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for i, got in pool.map(one, [0, 1, 2, 3] * 2):
            assert cosines(got, reference[[i, (i + 1) % 4]]).min() >= 0.99999


class _HeldEmbedder:
    """An embedder whose first call waits until released, recording every call's texts."""

    dim = 2

    def __init__(self):
        self.calls = []
        self.release = threading.Event()

    def encode(self, texts, **kw):
        self.calls.append(list(texts))
        if len(self.calls) == 1:
            self.release.wait(10)
        return np.array([[len(t), i] for i, t in enumerate(texts)], dtype=np.float32)


def test_requests_that_wait_together_share_one_forward_pass():
    fake = _HeldEmbedder()
    batcher = EmbeddingBatcher("fake", fake, max_batch=8, max_queue=8)
    try:
        first = batcher.submit(["a"])
        while not fake.calls:
            pass
        waiting = [batcher.submit(["bb", "ccc"]), batcher.submit(["dddd"]), batcher.submit(["e" * 5])]
        fake.release.set()
        results = [f.result(10) for f in [first] + waiting]
    finally:
        batcher.close()
    assert fake.calls == [["a"], ["bb", "ccc", "dddd", "eeeee"]]
    # each request gets its own rows of the shared pass
    assert [r[:, 0].tolist() for r in results] == [[1], [2, 3], [4], [5]]
    assert [r[:, 1].tolist() for r in results] == [[0], [0, 1], [2], [3]]


def test_a_full_embedding_queue_refuses():
    from tallow.serve.errors import RequestError

    fake = _HeldEmbedder()
    batcher = EmbeddingBatcher("fake", fake, max_batch=1, max_queue=1)
    try:
        batcher.submit(["a"])
        while not fake.calls:
            pass
        batcher.submit(["b"])
        with pytest.raises(RequestError) as e:
            batcher.submit(["c"])
        assert e.value.status == 429 and e.value.headers["Retry-After"]
    finally:
        fake.release.set()
        batcher.close()


def test_a_large_request_is_embedded_in_passes_of_max_batch(reference):
    """Memory stays bounded by --max-batch: 2,048 long texts in one pass would hold all
    their attention scores at once. The passes' rows are the library's rows."""
    class Recording:
        dim = 384

        def __init__(self):
            self.sizes = []

        def encode(self, texts, batch_size, **kw):
            self.sizes.append((len(texts), batch_size))
            return reference[[TEXTS.index(t) for t in texts]]

    fake = Recording()
    batcher = EmbeddingBatcher("fake", fake, max_batch=3, max_queue=4)
    try:
        texts = TEXTS * 3
        got = batcher.submit(texts).result(10)
    finally:
        batcher.close()
    assert fake.sizes == [(3, 3)] * 4
    np.testing.assert_array_equal(got, reference[[TEXTS.index(t) for t in texts]])


def test_a_request_whose_client_left_stops_between_passes():
    fake = _HeldEmbedder()
    batcher = EmbeddingBatcher("fake", fake, max_batch=2, max_queue=4)
    try:
        future = batcher.submit([str(i) for i in range(10)])
        while not fake.calls:
            pass
        assert not future.cancel()  # too late to unqueue: it is being embedded
        fake.release.set()
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(10)
        # the next request is served at once, after the one pass under way
        assert batcher.submit(["x"]).result(10).shape == (1, 2)
    finally:
        batcher.close()
    assert fake.calls == [["0", "1"], ["x"]]


def test_stopping_answers_the_waiting_requests_with_503():
    from tallow.serve.errors import RequestError

    fake = _HeldEmbedder()
    batcher = EmbeddingBatcher("fake", fake, max_batch=1, max_queue=4)
    running = batcher.submit(["a"])
    while not fake.calls:
        pass
    waiting = batcher.submit(["b"])
    batcher.stop()
    with pytest.raises(RequestError) as e:
        waiting.result(10)  # refused at once, not left waiting for a thread that has gone
    assert e.value.status == 503 and e.value.headers["Retry-After"]
    with pytest.raises(RequestError):
        batcher.submit(["c"])
    fake.release.set()
    assert running.result(10).shape == (1, 2)  # the pass under way finishes
    batcher.close()
