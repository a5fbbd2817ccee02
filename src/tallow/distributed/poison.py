"""Rows that kill their worker: found, left out and reported, not retried forever.

Ray restarts an actor whose process dies and hands it the same block again, with no
limit: a row that kills its worker every time (an out-of-memory kill on one huge
text, a crash in a tokenizer) stalls the job for good. ``AttemptLedger`` is a small
actor that survives the workers and counts, for each block, the attempts that began
and never ended: a worker that dies mid-block leaves its attempt open. Once a block
has taken ``MAX_DEATHS`` workers down, the next attempt embeds it one row at a time,
each row its own attempt; a row whose attempts died ``MAX_DEATHS`` times is the
poison row: it is left out, and the ledger keeps its id and where it came from for
the job to report. A worker killed for another reason (a node lost, a chaos test)
only costs a retry: one row is blamed only after two deaths on that row alone.
"""

from __future__ import annotations

import hashlib
import os

MAX_DEATHS = 2


class AttemptLedger:
    """The ledger (run as a Ray actor with no CPU of its own)."""

    def __init__(self):
        self.open = {}       # key -> attempts begun and not ended
        self.poison = []     # {"id", "source", "text"} of rows left out
        self.workers = {}    # pid -> node id of each worker process seen

    def begin(self, key: str) -> int:
        """Start an attempt at ``key``; returns how many earlier ones died."""
        died = self.open.get(key, 0)
        self.open[key] = died + 1
        return died

    def end(self, key: str) -> None:
        self.open.pop(key, None)

    def left_out(self, row: dict) -> None:
        if row not in self.poison:
            self.poison.append(row)

    def poisoned(self) -> list:
        return list(self.poison)

    def register(self, pid: int, node: str) -> None:
        self.workers[pid] = node

    def worker_pids(self) -> dict:
        return dict(self.workers)


def block_key(texts) -> str:
    """A block's identity across retries: a hash of its texts (a retry gets the same)."""
    h = hashlib.blake2b(digest_size=16)
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return f"{len(texts)}:{h.hexdigest()}"


def new_ledger(ray):
    """A fresh ledger actor for one job."""
    return ray.remote(num_cpus=0, max_restarts=0)(AttemptLedger).remote()


def register_worker(ray, ledger) -> None:
    ray.get(ledger.register.remote(os.getpid(), ray.get_runtime_context().get_node_id()))
