"""Prometheus metrics, one registry per app: requests by route and status, their latency, lookups, jobs by state. Where
several API processes serve one port (PROMETHEUS_MULTIPROC_DIR set before prometheus_client was imported), each writes
its counts to files there and a scrape sums them all."""
from __future__ import annotations
import os, time
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from starlette.types import ASGIApp, Receive, Scope, Send
from tunesvc.store import Store, reads
from tunesvc.states import JobState


class Metrics:
  def __init__(self, st: Store):
    self.registry = CollectorRegistry()
    self.requests = Counter("tunesvc_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry)
    self.latency = Histogram("tunesvc_request_seconds", "HTTP request latency", ["method", "route"], registry=self.registry,
                             buckets=(.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5))
    self.lookups = Counter("tunesvc_lookups", "kernel keys looked up", ["outcome"], registry=self.registry)
    self.store = st
    self.registry.register(self)

  def exposition(self) -> bytes:
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ: return generate_latest(self.registry)
    every = CollectorRegistry()
    multiprocess.MultiProcessCollector(every)
    every.register(self)  # the jobs, from the store
    return generate_latest(every)

  def collect(self):
    """Jobs by state, counted in the store at scrape time (every API process sees the same numbers)."""
    g = GaugeMetricFamily("tunesvc_jobs", "jobs by state", labels=["state"])
    counts = reads.jobs_by_state(self.store)
    for s in JobState: g.add_metric([s], counts.get(s, 0))
    yield g


class MetricsMiddleware:
  """Pure ASGI (no per-request task), labelled by the route's template so fuzzed paths do not mint new series."""
  def __init__(self, app: ASGIApp, metrics: Metrics): self.app, self.metrics = app, metrics

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http": return await self.app(scope, receive, send)
    start, status = time.perf_counter(), 500
    async def send_status(msg):
      nonlocal status
      if msg["type"] == "http.response.start": status = msg["status"]
      await send(msg)
    try: await self.app(scope, receive, send_status)
    finally:
      route = getattr(scope.get("route"), "path", "unmatched")
      self.metrics.requests.labels(scope["method"], route, str(status)).inc()
      self.metrics.latency.labels(scope["method"], route).observe(time.perf_counter() - start)
