"""The dashboard: pages whose scripts fetch the JSON API (tunesvc/static, package data), so the pages hold no data and need
no token; the browser asks for one when the API answers 401. Nothing is loaded from another origin.

Each page is page.html around its own fragment (kernels.html, ...) and script (kernels.js, ...)."""
from __future__ import annotations
from pathlib import Path
from string import Template
from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from tunesvc.api.kernels import KeyPath

STATIC = Path(__file__).resolve().parents[1] / "static"
# the scripts write data as text, never as markup; the policy makes that the only way anything runs
HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'", "Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)
static = StaticFiles(directory=STATIC)


def page(name: str, title: str) -> HTMLResponse:
  body = (STATIC / f"{name}.html").read_text()
  return HTMLResponse(Template((STATIC / "page.html").read_text()).substitute(title=title, page=name, body=body), headers=HEADERS)

@router.get("/")
def kernels_page(): return page("kernels", "kernels")

@router.get("/kernels/{key}")
def kernel_page(key: KeyPath): return page("kernel", f"kernel {key[:12]}")

@router.get("/workers")
def workers_page(): return page("workers", "workers")

@router.get("/models")
def models_page(): return page("models", "models")

@router.get("/queue")
def queue_page(): return page("queue", "queue")

@router.get("/docs")
def api_docs():
  """Swagger UI from its vendored files (static/swagger-ui), not a CDN: the API docs work offline."""
  return get_swagger_ui_html(openapi_url="/openapi.json", title="tunesvc API", swagger_js_url="/static/swagger-ui/swagger-ui-bundle.js",
                             swagger_css_url="/static/swagger-ui/swagger-ui.css", swagger_favicon_url="/static/swagger-ui/favicon-32x32.png")
