"""``tallow serve``: the embedding and decoder models behind an OpenAI-compatible HTTP API.

One module per part: ``app`` (Starlette routes), ``answers`` (OpenAI's response and
stream-chunk objects), ``params`` (request checks), ``errors`` (OpenAI's error JSON), ``embeddings`` (requests batched into one
forward pass), ``engine`` and ``sequence`` (continuous batching of generations),
``metrics`` (Prometheus text), ``sse`` (server-sent events), ``models`` (ids and
loading) and ``server`` (uvicorn). Needs the ``serve`` extra (Starlette, uvicorn).
"""
