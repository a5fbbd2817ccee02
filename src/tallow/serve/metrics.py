"""The server's counters, gauges and latency histograms, written in Prometheus' text
exposition format (version 0.0.4) for ``GET /metrics``.

A small registry of its own: the server needs four kinds of line, and writing them
keeps ``prometheus_client`` a test-only dependency. Every update takes one lock, so
the event loop and the model threads may update the same series.
"""

from __future__ import annotations

import math
import threading

# seconds: from a fast embedding to a long generation on a loaded CPU
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def _labels(names, values) -> str:
    if not names:
        return ""
    def escape(v):
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{n}="{escape(v)}"' for n, v in zip(names, values)) + "}"


def _number(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


class _Family:
    def __init__(self, registry, name: str, help: str, kind: str, labels=()):
        self.name, self.help, self.kind, self.label_names = name, help, kind, tuple(labels)
        self._lock = registry.lock
        self._values = {}
        registry.families.append(self)

    def _key(self, labels) -> tuple:
        if set(labels) != set(self.label_names):
            raise KeyError(f"{self.name} takes the labels {self.label_names}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)


class Counter(_Family):
    def __init__(self, registry, name, help, labels=()):
        super().__init__(registry, name, help, "counter", labels)

    def inc(self, amount: float = 1.0, **labels) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def lines(self):
        for key, v in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.label_names, key)} {_number(v)}"


class Gauge(_Family):
    def __init__(self, registry, name, help, labels=()):
        super().__init__(registry, name, help, "gauge", labels)

    def set(self, value: float, **labels) -> None:
        with self._lock:
            self._values[self._key(labels)] = float(value)

    def inc(self, amount: float = 1.0, **labels) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def get(self, **labels) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def lines(self):
        for key, v in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.label_names, key)} {_number(v)}"


class Histogram(_Family):
    def __init__(self, registry, name, help, labels=(), buckets=LATENCY_BUCKETS):
        super().__init__(registry, name, help, "histogram", labels)
        self.buckets = tuple(buckets) + (math.inf,)

    def observe(self, value: float, **labels) -> None:
        key = self._key(labels)
        with self._lock:
            counts, total = self._values.get(key, ([0] * len(self.buckets), 0.0))
            for i, edge in enumerate(self.buckets):
                if value <= edge:
                    counts[i] += 1
            self._values[key] = (counts, total + value)

    def lines(self):
        names = self.label_names + ("le",)
        for key, (counts, total) in sorted(self._values.items()):
            for edge, c in zip(self.buckets, counts):
                yield f"{self.name}_bucket{_labels(names, key + (_number(edge),))} {c}"
            yield f"{self.name}_sum{_labels(self.label_names, key)} {_number(total)}"
            yield f"{self.name}_count{_labels(self.label_names, key)} {counts[-1]}"


class Registry:
    def __init__(self):
        self.lock = threading.Lock()
        self.families = []

    def render(self) -> str:
        out = []
        with self.lock:
            for f in self.families:
                out.append(f"# HELP {f.name} {f.help}")
                out.append(f"# TYPE {f.name} {f.kind}")
                out.extend(f.lines())
        return "\n".join(out) + "\n"


class ServerMetrics:
    """The series ``tallow serve`` exposes."""

    def __init__(self):
        r = self.registry = Registry()
        self.requests = Counter(r, "tallow_requests_total", "HTTP requests answered, by endpoint and status",
                                ("endpoint", "status"))
        self.latency = Histogram(r, "tallow_request_duration_seconds",
                                 "Time from a request's arrival to its last byte, by endpoint", ("endpoint",))
        self.prompt_tokens = Counter(r, "tallow_prompt_tokens_total", "Tokens read (prompts and embedded texts)",
                                     ("model",))
        self.completion_tokens = Counter(r, "tallow_completion_tokens_total", "Tokens generated", ("model",))
        self.queue_length = Gauge(r, "tallow_queue_length", "Requests waiting for a model thread", ("model",))
        self.active_sequences = Gauge(r, "tallow_active_sequences",
                                      "Sequences being generated (each holds a KV cache)", ("model",))
        self.batch_size = Histogram(r, "tallow_batch_size", "Sequences or texts per model step",
                                    ("model",), buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.time_to_first_token = Histogram(r, "tallow_time_to_first_token_seconds",
                                             "Time from a generation request's arrival to its first token",
                                             ("model",))

    def render(self) -> str:
        return self.registry.render()
