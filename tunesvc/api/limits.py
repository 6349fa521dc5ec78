"""What one request may cost: a bound on the kernel nodes a request may make the API validate, and a per-client token
bucket for the open (tokenless) endpoints, so that no one caller can hold the API for the others."""
from __future__ import annotations
import time
from fastapi import HTTPException


def json_nodes(docs: list, limit: int) -> int:
  """The kernel nodes ({"op": ...} objects) in these documents, counted without validating them; stops past `limit`."""
  n, stack = 0, list(docs)
  while stack and n <= limit:
    x = stack.pop()
    if isinstance(x, dict):
      n += "op" in x
      stack.extend(x.values())
    elif isinstance(x, list): stack.extend(x)
  return n

def check_nodes(docs: list, limit: int) -> None:
  if (n := json_nodes(docs, limit)) > limit:
    raise HTTPException(413, f"the documents hold more than {limit} kernel nodes in all ({n}+): send fewer per request, or their keys")


class RateLimit:
  """A token bucket per client address: `rate` requests a second, bursts of `burst`; 0 rate: no limit. Bounded memory:
  full, it starts over (a burst of new addresses forgets the old ones)."""
  def __init__(self, rate: float, burst: float, max_clients: int = 1 << 16):
    self.rate, self.burst, self.max_clients = rate, burst, max_clients
    self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)

  def retry_after(self, client: str, cost: float = 1.0) -> float:
    """0 if the request may go ahead (and it is charged), else the seconds until it may."""
    if self.rate <= 0: return 0.0
    now = time.monotonic()
    tokens, last = self.buckets.get(client, (self.burst, now))
    tokens = min(self.burst, tokens + (now - last) * self.rate)
    if tokens < cost: return (cost - tokens) / self.rate
    if len(self.buckets) >= self.max_clients: self.buckets = {}
    self.buckets[client] = (tokens - cost, now)
    return 0.0

  def check(self, client: str, cost: float = 1.0) -> None:
    if (wait := self.retry_after(client, cost)) > 0:
      raise HTTPException(429, f"too many requests from {client}: retry in {wait:.2f} s", {"Retry-After": str(max(1, round(wait)))})
