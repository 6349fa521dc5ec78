"""The runtime's hot path: the tuned opts of kernels on a device fingerprint."""
from __future__ import annotations
import asyncio, json, re, time
from types import SimpleNamespace
from typing import Annotated, Optional
from urllib.parse import parse_qsl
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send
from tunesvc.api.auth import lookup_role
from tunesvc.api.limits import check_nodes
from tunesvc.api.kernels import load_all
from tunesvc.api.models import HEX64, MAX_INT, LookupRequest, LookupResponse, OptsOut
from tunesvc.store import reads

router = APIRouter(prefix="/v1/opts", tags=["opts"], dependencies=[Depends(lookup_role)])


class RecentAnswers:
  """Lookup answers (misses too) kept for `ttl_s`: a kernel that a fleet's processes all ask about costs one read per
  interval, not one per process. A report to this API process clears them; one reported to another API process over the
  same store shows here within `ttl_s`. Bounded: full, it starts over."""
  def __init__(self, ttl_s: float, max_entries: int = 1 << 16):
    self.ttl_s, self.max_entries = ttl_s, max_entries
    self.kept: dict[tuple, tuple[float, Optional[dict]]] = {}  # query -> (until, answer)
  def clear(self) -> None: self.kept = {}

  def get(self, q: tuple, now: float):
    """(True, answer) while one is kept, else (False, None)."""
    hit = self.kept.get(q)
    return (True, hit[1]) if hit is not None and hit[0] > now else (False, None)

  def put(self, q: tuple, answer: Optional[dict], now: float) -> None:
    if self.ttl_s <= 0: return
    if len(self.kept) >= self.max_entries: self.kept = {}
    self.kept[q] = (now + self.ttl_s, answer)


async def answers(state, keys: list[str], fingerprint: str, version: Optional[int]) -> list[Optional[dict]]:
  now, recent, st = time.monotonic(), state.recent_answers, state.store
  got = [recent.get((k, fingerprint, version), now) for k in keys]
  if all(kept for kept, _ in got): out = [a for _, a in got]
  else:
    # the endpoints are async and SQLite is read in the event loop: a local indexed read takes less than the hop to the
    # threadpool and back that a sync endpoint costs (and the GIL serialises the work anyway); PostgreSQL's round trip
    # over the network must not hold the loop, so it goes to a thread
    rows = await asyncio.to_thread(reads.lookup, st, keys, fingerprint, version) if st.postgres else reads.lookup(st, keys, fingerprint, version)
    out = [None if (r := rows.get(k)) is None else
           {"kernel_key": k, "fingerprint": fingerprint, "action_space_version": r.action_space_version, "opts": r.best_opts,
            "best_s": r.best_s, "baseline_s": r.baseline_s} for k in keys]
    for k, a in zip(keys, out): recent.put((k, fingerprint, version), a, now)
  hits = sum(a is not None for a in out)
  state.metrics.lookups.labels("hit").inc(hits)
  state.metrics.lookups.labels("miss").inc(len(keys) - hits)
  return out

def not_tuned(key: str, fingerprint: str, version: Optional[int]) -> str:
  return f"kernel {key} is not tuned for fingerprint {fingerprint}" + ("" if version is None else f" at action-space version {version}")


@router.get("/{kernel_key}", response_model=OptsOut)
async def opts(kernel_key: Annotated[str, Path(pattern=HEX64)], fingerprint: Annotated[str, Query(pattern=HEX64)], request: Request,
               action_space_version: Annotated[Optional[int], Query(ge=0, le=MAX_INT, description="default: the newest tuned")] = None):
  """The fastest verified opts of this kernel on this fingerprint, or 404: then run the hand-coded ones."""
  if "authorization" not in request.headers: request.app.state.rate_limit.check(client_of(request.scope))
  if (a := (await answers(request.app.state, [kernel_key], fingerprint, action_space_version))[0]) is None:
    raise HTTPException(404, not_tuned(kernel_key, fingerprint, action_space_version))
  return a


def client_of(scope) -> str: return (scope.get("client") or ("?",))[0]

# a body this small (16 keys: 1.2 KB) is parsed in the event loop: the hop to a thread costs more than the parse, and while
# that thread holds the GIL the loop's own SQLite reads wait to take it back (py-spy: lookups 2x faster without the hop)
INLINE_BYTES = 64 << 10

def _parse(raw: bytes, nodes: int) -> LookupRequest:
  """The body parsed and bounded (413 past `nodes` kernel nodes in all)."""
  try: body = LookupRequest.model_validate_json(raw)
  except ValidationError as e: raise RequestValidationError([{**x, "loc": ("body", *x["loc"])} for x in e.errors()]) from None
  check_nodes(body.kernels, nodes)
  return body

def _keys(docs: list[dict]) -> list[str]: return [k.key for k in load_all(docs, "kernels")]

@router.post("/lookup", response_model=LookupResponse, openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
             "schema": LookupRequest.model_json_schema()}}}}, responses={413: {"description": "more kernel nodes than one request may hold"},
                                                                         429: {"description": "this client's open lookups are over their rate"}})
async def lookup(request: Request):
  """A batch of keys and/or documents in one query (LookupRequest); null where nothing is tuned. Documents cost: at most
  TUNESVC_LOOKUP_NODES kernel nodes in all, validated off the event loop (as is any large body), each document one more
  request of the rate an open client has."""
  state, is_open = request.app.state, "authorization" not in request.headers
  if is_open: state.rate_limit.check(client_of(request.scope))
  raw, nodes = await request.body(), state.settings.lookup_nodes
  body = _parse(raw, nodes) if len(raw) <= INLINE_BYTES else await asyncio.to_thread(_parse, raw, nodes)
  keys = body.keys
  if body.kernels:
    if is_open: state.rate_limit.check(client_of(request.scope), len(body.kernels))
    keys = keys + await asyncio.to_thread(_keys, body.kernels)
  return {"results": await answers(state, keys, body.fingerprint, body.action_space_version)}  # validated once, as the response_model


_HASH, _VERSION = re.compile(HEX64), re.compile(r"[0-9]{1,10}")  # the route's hash pattern; a plain decimal version
_PATH = re.compile(f"/v1/opts/({HEX64.strip('^$')})")

class FastLookup:
  """Answers a well-formed open `GET /v1/opts/{key}` in front of FastAPI: its routing, dependency injection and response
  validation cost several times the indexed read. Anything else -- a token to check, a malformed or unusual query --
  goes on to the route above, which gives the same answers and every error message."""
  def __init__(self, app: ASGIApp, state):
    self.app, self.state = app, state
    self.route = SimpleNamespace(path="/v1/opts/{kernel_key}")  # the label the metrics give the route

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http" or scope["method"] != "GET" or not self.state.settings.open_lookups or not (m := _PATH.fullmatch(scope["path"])):
      return await self.app(scope, receive, send)
    try: query = dict(q := parse_qsl(scope["query_string"].decode("ascii"), strict_parsing=True))
    except (UnicodeDecodeError, ValueError): return await self.app(scope, receive, send)
    version = query.get("action_space_version")
    if (len(q) != len(query) or query.keys() - {"fingerprint", "action_space_version"} or not _HASH.fullmatch(query.get("fingerprint", ""))
        or (version is not None and not (_VERSION.fullmatch(version) and int(version) <= MAX_INT))):
      return await self.app(scope, receive, send)
    if self.state.rate_limit.rate > 0 and not any(k == b"authorization" for k, _ in scope["headers"]) and \
       self.state.rate_limit.retry_after(client_of(scope)) > 0:
      return await self.app(scope, receive, send)  # the route answers 429 with its Retry-After
    key, fp, version = m[1], query["fingerprint"], None if version is None else int(version)
    scope["route"] = self.route
    answer = (await answers(self.state, [key], fp, version))[0]
    status, body = (200, json.dumps(answer)) if answer is not None else (404, json.dumps({"detail": not_tuned(key, fp, version)}))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body.encode()})
