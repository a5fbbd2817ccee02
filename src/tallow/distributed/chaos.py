"""Killing embedding workers on purpose, to show that a lost worker loses no row.

``WorkerKiller`` is a thread of the driver that SIGKILLs one embedding actor's
process every ``interval`` seconds (the processes whose title Ray sets to
``ray::...EmbedWorker...``, among the driver's descendants: a local runtime's
processes are). ``tallow bench distributed --chaos`` and the tests run a job under it
and check that every row comes out once, with the vectors of an undisturbed run.
"""

from __future__ import annotations

import os
import signal
import threading


def embed_worker_pids() -> list:
    """Pids of the live embedding actors among this process's descendants."""
    import psutil  # Ray ships it (ray/thirdparty_files), on the path once ray is imported

    pids = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "EmbedWorker" in " ".join(proc.cmdline()):
                pids.append(proc.pid)
        except psutil.Error:  # exited meanwhile
            continue
    return sorted(pids)


class WorkerKiller(threading.Thread):
    """Every ``interval`` seconds, SIGKILL one embedding worker (taking turns through
    them), at most ``max_kills`` times; ``kills`` lists the pids killed."""

    def __init__(self, interval: float, max_kills: int | None = None):
        super().__init__(name="tallow-worker-killer", daemon=True)
        self.interval, self.max_kills = float(interval), max_kills
        self.kills: list = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        turn = 0
        while not self._stop_event.wait(self.interval):
            if self.max_kills is not None and len(self.kills) >= self.max_kills:
                return
            pids = embed_worker_pids()
            if not pids:
                continue
            pid = pids[turn % len(pids)]
            turn += 1
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append(pid)

    def stop(self) -> list:
        self._stop_event.set()
        self.join()
        return self.kills
