"""Prometheus metrics of one server, in a registry of its own (several apps can live in
one process, as in the tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Latency buckets from a 1-text request on an idle CPU (~ms) to a full queue under overload (~s).
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "bertlite_requests", "HTTP requests by endpoint and status code", ["endpoint", "status"], registry=r
        )
        self.in_flight = Gauge("bertlite_requests_in_flight", "embedding requests being served", registry=r)
        self.queue_depth = Gauge("bertlite_queue_depth", "embedding requests waiting for the model worker", registry=r)
        self.latency = Histogram(
            "bertlite_request_duration_seconds",
            "time from request to response",
            ["endpoint"],
            buckets=SECONDS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "bertlite_queue_wait_seconds", "time a request waits for the model worker", buckets=SECONDS, registry=r
        )
        self.batch_seconds = Histogram(
            "bertlite_batch_duration_seconds", "model time of one worker batch", buckets=SECONDS, registry=r
        )
        self.batch_tokens = Histogram(
            "bertlite_batch_tokens",
            "tokens in one worker batch",
            buckets=tuple(2**i for i in range(1, 17)),
            registry=r,
        )
        self.batch_requests = Histogram(
            "bertlite_batch_requests",
            "requests in one worker batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.tokens = Counter("bertlite_tokens", "tokens embedded (after truncation)", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
