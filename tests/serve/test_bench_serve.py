"""``tallow bench serve``'s client: every request answered, refused or counted lost."""

from __future__ import annotations

import pytest

from support.serving import CHAT_MODEL, EMBED_MODEL, running_server

from tallow.bench.serve import load
from tallow.cli.bench import SUITES


def test_the_suite_is_registered():
    assert SUITES["serve"] == "serve"


@pytest.mark.slow
def test_load_counts_answers_and_refusals(minilm_dir, smollm2_gguf):
    # one sequence, no queue, four clients: some chats are refused, none lost
    with running_server(minilm_dir, smollm2_gguf, max_batch=1, max_queue=0) as server:
        r = load(server.url, CHAT_MODEL, EMBED_MODEL, 4, 2.0)
    assert r["lost"] == 0 and r["requests"] == r["answered"] + r["refused"]
    assert r["chat_answered"] >= 1 and r["embed_answered"] >= 1 and r["refused"] >= 1
    assert r["tokens_per_s"] > 0 and r["p50_s"] <= r["p99_s"]


def test_load_counts_a_dead_server_as_lost():
    r = load("http://127.0.0.1:9", CHAT_MODEL, None, 2, 0.2)
    assert r["answered"] == 0 and r["lost"] == r["requests"] >= 2


def test_the_default_load_is_a_minute_at_each_client_count_and_quick_stays_short():
    from tallow.bench.serve import plan
    from tallow.cli.main import build_parser

    def parsed(*argv):
        return build_parser().parse_args(["bench", "serve", *argv])

    levels, seconds, rounds = plan(parsed())
    assert (levels, seconds, rounds) == ((1, 4, 16, 64), 60.0, 2)  # the load test
    levels, seconds, rounds = plan(parsed("--quick"))
    # server starts aside, --quick loads for well under a minute in all
    assert seconds * (len(levels) + rounds) <= 40
    assert plan(parsed("--clients", "2,8", "--duration", "5"))[:2] == ((2, 8), 5.0)
