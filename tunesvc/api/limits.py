"""What one request may cost: a bound on the kernel nodes a request may make the API validate, a per-client token bucket
for the open (tokenless) endpoints, and bounds on a request's head and on how long it may take to arrive, so that no one
caller can hold the API for the others."""
from __future__ import annotations
import asyncio, functools, ipaddress, json, time
from typing import Optional
from fastapi import HTTPException
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


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


@functools.lru_cache(maxsize=4096)
def _client(address: str) -> str:
  """The client an address is: itself, or for IPv6 its /64 (one host holds all 2**64 addresses of it)."""
  if ":" not in address: return address
  try: return str(ipaddress.IPv6Network(f"{address.split('%')[0]}/64", strict=False))
  except ValueError: return address


class RateLimit:
  """A token bucket per client (an address; an IPv6 /64): `rate` requests a second, bursts of `burst`; 0 rate: no limit.
  Bounded memory: full, it forgets the buckets that have refilled (nothing changes for them), and only where every one
  still holds a debt, all of them."""
  def __init__(self, rate: float, burst: float, max_clients: int = 1 << 16):
    self.rate, self.burst, self.max_clients = rate, burst, max_clients
    self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)

  def retry_after(self, address: str, cost: float = 1.0) -> float:
    """0 if the request may go ahead (and it is charged), else the seconds until it may."""
    if self.rate <= 0: return 0.0
    now, client = time.monotonic(), _client(address)
    tokens, last = self.buckets.get(client, (self.burst, now))
    tokens = min(self.burst, tokens + (now - last) * self.rate)
    if tokens < cost: return (cost - tokens) / self.rate
    if len(self.buckets) >= self.max_clients:
      self.buckets = {c: (t, w) for c, (t, w) in self.buckets.items() if t + (now - w) * self.rate < self.burst}
      if len(self.buckets) >= self.max_clients: self.buckets = {}
    self.buckets[client] = (tokens - cost, now)
    return 0.0

  def check(self, client: str, cost: float = 1.0) -> None:
    if (wait := self.retry_after(client, cost)) > 0:
      raise HTTPException(429, f"too many requests from {client}: retry in {wait:.2f} s", {"Retry-After": str(max(1, round(wait)))})


class _Refused(Exception): pass  # raised in a parser callback: httptools stops parsing the request


class BoundedHttp(HttpToolsProtocol):
  """uvicorn's HTTP/1.1 protocol (httptools) with bounds on a request before the app sees it. httptools keeps however many
  header bytes a client sends, and nothing times out a head or a body that trickles in (slow loris): each such connection
  held memory, a socket and a task for as long as the client liked. Here a head (request line and headers) may hold
  `max_head_bytes` (431 past them) and a request, head and body, must arrive whole within `receive_s` of its first byte (or
  of the connection, for the first): a head that does not is answered 408, a body that does not ends the connection.
  Between requests, keep-alive's own timeout closes an idle connection."""
  def __init__(self, *args, max_head_bytes: int, receive_s: float, **kw):
    super().__init__(*args, **kw)
    self.max_head_bytes, self.receive_s = max_head_bytes, receive_s
    self.head_bytes, self.unparsed, self.in_head = 0, 0, True  # the head's parsed bytes; bytes received while it is unfinished
    self.timer: Optional[asyncio.TimerHandle] = None

  def _arm(self) -> None:
    if self.timer is not None: self.timer.cancel()
    self.timer = self.loop.call_later(self.receive_s, self._too_slow)

  def _disarm(self) -> None:
    if self.timer is not None: self.timer.cancel()
    self.timer = None

  def _refuse(self, status: int, reason: str, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                         % (status, reason.encode(), len(body), body))
    self.transport.close()

  def _too_large(self) -> None:
    self._refuse(431, "Request Header Fields Too Large", f"a request's line and headers may hold {self.max_head_bytes} bytes")

  def send_400_response(self, msg: str) -> None:
    if not self.transport.is_closing(): super().send_400_response(msg)  # not after our own answer (_Refused)

  def _too_slow(self) -> None:
    self.timer = None
    if self.transport.is_closing(): return
    if self.cycle is not None and not self.cycle.response_complete and self.in_head: return self._arm()  # a pipelined head waits for us
    if self.in_head: self._refuse(408, "Request Timeout", f"the request did not arrive within {self.receive_s:g} s")
    else: self.transport.close()  # the app may be answering already: it sees the client gone

  def connection_made(self, transport) -> None:
    super().connection_made(transport)
    self._arm()

  def connection_lost(self, exc) -> None:
    self._disarm()
    super().connection_lost(exc)

  def on_message_begin(self) -> None:
    super().on_message_begin()
    self.head_bytes, self.unparsed, self.in_head = 0, 0, True
    self._arm()

  def on_url(self, url: bytes) -> None:
    self.head_bytes += len(url)
    super().on_url(url)

  def on_header(self, name: bytes, value: bytes) -> None:
    self.head_bytes += len(name) + len(value) + 4
    super().on_header(name, value)

  def on_headers_complete(self) -> None:
    self.in_head = False
    if self.head_bytes > self.max_head_bytes:
      self._too_large()
      raise _Refused
    super().on_headers_complete()

  def on_message_complete(self) -> None:
    self._disarm()
    super().on_message_complete()

  def data_received(self, data: bytes) -> None:
    super().data_received(data)
    # a head still unfinished after this chunk: httptools keeps what it has of it, so count what came
    self.unparsed = self.unparsed + len(data) if self.in_head else 0
    if self.unparsed > self.max_head_bytes and not self.transport.is_closing(): self._too_large()
