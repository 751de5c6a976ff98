"""What ``zoo serve`` counts, in Prometheus' text format (version 0.0.4), for
``GET /metrics``: requests by route and status, tokens read and made, the queue and the
running rows of each model, the sizes of the batches each step ran, and histograms of
time to first token and of a request's whole time.

Written by hand (a few counters, no client library): a counter is a float that only
grows, a gauge one that is set, a histogram cumulative buckets with their sum and count,
each labelled. Every method is safe from any thread (the engine's and the server's).
"""

from __future__ import annotations

import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: the buckets of the time histograms."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
"""Rows: the buckets of the batch-size histogram."""

HELP = {
    "zoo_requests_total": ("counter", "Requests answered, by route and HTTP status."),
    "zoo_prompt_tokens_total": ("counter", "Tokens read from prompts and inputs."),
    "zoo_generated_tokens_total": ("counter", "Tokens generated."),
    "zoo_queue_length": ("gauge", "Requests waiting for a place in their model's batch."),
    "zoo_running_rows": ("gauge", "Sequences being decoded now."),
    "zoo_batch_rows": ("histogram", "Rows each decoding step ran."),
    "zoo_time_to_first_token_seconds": ("histogram",
                                        "From a request's arrival to its first token."),
    "zoo_request_seconds": ("histogram", "From a request's arrival to its last byte."),
}
"""Each metric's type and help line."""


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    quoted = (str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
              for v in labels.values())
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, quoted)) + "}"


class Metrics:
    """The server's counters, gauges and histograms (:data:`HELP` names them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple, float]] = defaultdict(dict)
        self._histograms: dict[str, dict[tuple, list[float]]] = defaultdict(dict)

    def add(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to a counter."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[name][key] = self._values[name].get(key, 0.0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge."""
        with self._lock:
            self._values[name][tuple(sorted(labels.items()))] = float(value)

    def observe(self, name: str, value: float, **labels: str) -> None:
        """Count ``value`` in a histogram."""
        bounds = BATCH_BUCKETS if name == "zoo_batch_rows" else LATENCY_BUCKETS
        key = tuple(sorted(labels.items()))
        with self._lock:
            counts = self._histograms[name].setdefault(key, [0.0] * (len(bounds) + 2))
            for i, bound in enumerate(bounds):
                if value <= bound:
                    counts[i] += 1
            counts[-2] += value  # the sum
            counts[-1] += 1  # the count, which is also the +Inf bucket

    def value(self, name: str, **labels: str) -> float:
        """A counter's or gauge's value now (0 where never set)."""
        with self._lock:
            return self._values[name].get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        """Every metric in Prometheus' text format."""
        lines = []
        with self._lock:
            for name, (kind, text) in HELP.items():
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                for key, value in sorted(self._values.get(name, {}).items()):
                    lines.append(f"{name}{_labels(dict(key))} {value:g}")
                bounds = BATCH_BUCKETS if name == "zoo_batch_rows" else LATENCY_BUCKETS
                for key, counts in sorted(self._histograms.get(name, {}).items()):
                    for bound, count in zip((*bounds, "+Inf"), (*counts[:-2], counts[-1])):
                        labels = {**dict(key), "le": f"{bound}"}
                        lines.append(f"{name}_bucket{_labels(labels)} {count:g}")
                    lines.append(f"{name}_sum{_labels(dict(key))} {counts[-2]:g}")
                    lines.append(f"{name}_count{_labels(dict(key))} {counts[-1]:g}")
        return "\n".join(lines) + "\n"
