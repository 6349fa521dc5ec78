"""The HTTP API (FastAPI, versioned under /v1, OpenAPI at /docs). `create_app(settings)` builds one app over one store;
`tunesvc serve` runs it with uvicorn, tests run it in-process."""
from __future__ import annotations
import asyncio, contextlib, gc, json, logging
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from sqlalchemy import exc, text
from starlette.exceptions import HTTPException
from tunesvc.api import admin, cost_models, dashboard, kernels, opts, programs, status, workers
from tunesvc.api.limits import RateLimit
from tunesvc.api.metrics import Metrics, MetricsMiddleware
from tunesvc.config import Settings
from tunesvc.store import Store, queue

log = logging.getLogger("tunesvc")


class ASCIIJSON(JSONResponse):
  """Errors quote the request, which may hold a lone surrogate that UTF-8 cannot encode; \\u escapes always can."""
  def render(self, content) -> bytes: return json.dumps(content, ensure_ascii=True, allow_nan=False).encode()

def error(status: int, detail, headers=None) -> ASCIIJSON: return ASCIIJSON({"detail": detail}, status, headers)

async def invalid_request(_: Request, e: Exception) -> ASCIIJSON:
  assert isinstance(e, RequestValidationError), "registered for it (Starlette types every handler by Exception)"
  errs = e.errors()
  if bad := next((x for x in errs if x["type"] == "json_invalid"), None):
    return error(400, f"malformed JSON at character {bad['loc'][-1]}: {bad.get('ctx', {}).get('error', 'cannot parse')}")
  # loc, msg and type only: the input and ctx may hold values JSON cannot carry (NaN from 1e999)
  return error(422, [{"loc": list(x["loc"]), "msg": x["msg"], "type": x["type"]} for x in errs])


class SecurityHeaders:
  """On every answer: a browser takes its content type as given (a JSON answer quoting a caller's kernel name or path is
  never sniffed into a page), no other site may frame it (the dashboard's buttons under someone else's page), and no
  page of ours hands its address to another site."""
  HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer")]
  def __init__(self, app: ASGIApp): self.app = app

  async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http": return await self.app(scope, receive, send)
    async def send_with(msg):
      if msg["type"] == "http.response.start": msg["headers"] = [*msg.get("headers", ()), *self.HEADERS]
      await send(msg)
    await self.app(scope, receive, send_with)


RETRY_AFTER_S = 5

async def database_trouble(_: Request, e: Exception) -> ASCIIJSON:
  """A full disk, a held write lock, a dropped connection: a JSON 503 the client may retry, the connection kept. The
  pool's next checkout reconnects (pre-ping), so the service recovers by itself once the database does."""
  log.warning("database: %s", str(e).splitlines()[0][:300])
  return error(503, f"the database cannot answer now ({type(getattr(e, 'orig', e)).__name__}: {str(getattr(e, 'orig', e))[:200]}); "
                    f"retry in {RETRY_AFTER_S} s", {"Retry-After": str(RETRY_AFTER_S)})


async def sweep(st: Store, every_s: float) -> None:
  """Lapsed leases are also swept by every claim; this catches them when no worker is claiming."""
  while True:
    await asyncio.sleep(every_s)
    try: await asyncio.to_thread(queue.expire, st)
    except Exception: log.exception("sweeping lapsed leases failed")  # the database may be away for a moment; try again later


def create_app(settings: Settings | None = None) -> FastAPI:
  settings = settings or Settings.from_env()
  st = Store(settings.database_url)

  @contextlib.asynccontextmanager
  async def lifespan(_: FastAPI):
    task = asyncio.create_task(sweep(st, settings.sweep_s))
    # what start-up built (modules, schemas, routes) lives as long as the process: out of the collector, the gen-2 collection
    # a large body's parse sets off (holding the GIL /healthz waits for) scans only the request's own objects -- 4 documents
    # of 4,000 nodes parse in 45 ms, and took 60-240 ms while the collector walked the whole heap
    gc.collect()
    gc.freeze()
    yield
    task.cancel()
    st.close()

  app = FastAPI(title="tunesvc", version="1", description="Kernel autotuning as a service.", lifespan=lifespan, docs_url=None, redoc_url=None,
                max_body_size=settings.max_body_bytes)
  app.state.settings, app.state.store, app.state.metrics = settings, st, Metrics(st)
  app.state.recent_answers = opts.RecentAnswers(settings.answer_ttl_s)
  app.state.rate_limit = RateLimit(settings.open_rate_per_s, 2 * settings.open_rate_per_s)
  for r in (kernels.router, opts.router, workers.router, status.router, programs.router, cost_models.router, admin.router,
            dashboard.router): app.include_router(r)
  app.mount("/static", dashboard.static)
  app.add_middleware(opts.FastLookup, state=app.state)
  # without tokens every caller may do everything: a web page whose name was rebound to this address (DNS rebinding) would
  # be one, its requests same-origin to the browser; they carry its name as Host, so only the service's own names pass
  if not settings.tokens: app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts), www_redirect=False)
  app.add_middleware(SecurityHeaders)
  app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)  # added last: outermost, so it counts the fast lookups too
  app.add_exception_handler(RequestValidationError, invalid_request)
  app.add_exception_handler(HTTPException, lambda _, e: error(e.status_code, e.detail, e.headers))
  app.add_exception_handler(queue.NotFound, lambda _, e: error(404, str(e)))
  app.add_exception_handler(queue.Conflict, lambda _, e: error(409, str(e)))
  app.add_exception_handler(queue.Invalid, lambda _, e: error(422, str(e)))
  app.add_exception_handler(queue.Forbidden, lambda _, e: error(403, str(e)))
  app.add_exception_handler(queue.TooMany, lambda _, e: error(429, str(e), {"Retry-After": "60"}))
  app.add_exception_handler(exc.OperationalError, database_trouble)
  app.add_exception_handler(exc.InterfaceError, database_trouble)

  @app.get("/healthz", tags=["service"], responses={503: {"description": "the database does not answer"}})
  def healthz():
    try:
      with st.engine.connect() as c: c.execute(text("SELECT 1"))
    except Exception as e: return error(503, f"database: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return {"ok": True}

  @app.get("/metrics", tags=["service"], response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
  def metrics() -> Response: return Response(app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

  return app
