"""The dashboard: the JSON endpoints its workers and queue pages read (in-process), and the pages themselves in headless
Debian Chromium driven by Playwright against a real server holding realistic results."""
import os, re
from pathlib import Path
import httpx
import pytest
from search_results import examples
from test_api import SUB, WRK, W, api, claim, confirm, register, report, submit  # noqa: F401 (api is a fixture)

CHROMIUM = "/usr/bin/chromium"  # Debian's package, which `make test` installs; Playwright's own browser downloads are never used


def chromium(p, home: Path):
  """Headless chromium whose home is `home`: its dconf cache and crash-report folder go there, not under the user's HOME."""
  env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config")}
  return p.chromium.launch(executable_path=CHROMIUM, headless=True, env=env)


def test_workers_are_listed_newest_first_with_the_job_each_searches(api):
  job, _ = submit(api, examples()[:2])
  a, b = register(api, "a"), register(api, "b")
  assert claim(api, a)["job_id"] == job["job_id"]
  page = api.get("/v1/workers", headers=SUB).json()
  assert [(w["name"], w["state"], w["job_id"], w["kernel_name"]) for w in page["workers"]] == [("b", "idle", None, None),
                                                                                                ("a", "busy", job["job_id"], examples()[0].name)]
  assert page["next_offset"] is None and abs(page["now"] - page["workers"][1]["last_heartbeat"]) < 60
  first = api.get("/v1/workers", params={"limit": 1}, headers=WRK).json()
  assert [w["worker_id"] for w in first["workers"]] == [b] and first["next_offset"] == 1
  assert [w["worker_id"] for w in api.get("/v1/workers", params={"offset": 1}, headers=SUB).json()["workers"]] == [a]


def test_jobs_are_paged_by_state_with_attempts_errors_and_counts(api):
  a, b, c = submit(api, examples()[:3])
  d, = submit(api, examples()[3:4], priority=5)
  wid = register(api)
  assert [claim(api, wid)["job_id"] for _ in range(3)] == [d["job_id"], a["job_id"], b["job_id"]]
  assert report(api, wid, a).status_code == 200
  api.post(f"/v1/workers/{wid}/report", json={"job_id": b["job_id"], "error": "device lost", "retry": False}, headers=W(wid))
  page = api.get("/v1/jobs", headers=SUB).json()
  assert page["counts"] == {"done": 1, "failed": 1, "running": 1, "queued": 2} and page["next_offset"] is None  # a's confirm job waits
  check = page["jobs"][0]
  assert check["kind"] == "confirm" and check["kernel_key"] == a["kernel_key"] and check["result"] is None
  assert [j["job_id"] for j in page["jobs"]] == [check["job_id"], d["job_id"], c["job_id"], b["job_id"], a["job_id"]]  # newest first
  got = {j["job_id"]: j for j in page["jobs"]}
  assert got[a["job_id"]]["result"]["speedup"] == 2.0 and got[a["job_id"]]["kernel_name"] == examples()[0].name
  assert got[b["job_id"]]["state"] == "failed" and got[b["job_id"]]["attempts"] == 1 and "device lost" in got[b["job_id"]]["error"]
  assert got[d["job_id"]]["worker_id"] == wid and got[d["job_id"]]["lease_expires"] is not None and got[c["job_id"]]["worker_id"] is None
  assert [j["job_id"] for j in api.get("/v1/jobs", params={"state": "queued"}, headers=WRK).json()["jobs"]] == [check["job_id"], c["job_id"]]
  two = api.get("/v1/jobs", params={"limit": 2, "offset": 2}, headers=SUB).json()
  assert [j["job_id"] for j in two["jobs"]] == [c["job_id"], b["job_id"]] and two["next_offset"] == 4


def test_queued_jobs_come_in_claim_order(api):
  low, = submit(api, examples()[:1])
  high, = submit(api, examples()[1:2], priority=5)
  later, = submit(api, examples()[2:3], priority=5)
  queued = api.get("/v1/jobs", params={"state": "queued"}, headers=SUB).json()["jobs"]
  assert [j["job_id"] for j in queued] == [high["job_id"], later["job_id"], low["job_id"]]
  assert claim(api, register(api))["job_id"] == high["job_id"]


@pytest.mark.parametrize("url", ["/v1/workers?limit=0", "/v1/workers?limit=501", "/v1/workers?offset=-1", "/v1/jobs?state=lost",
                                 "/v1/jobs?limit=x", f"/v1/jobs?offset={2**64}", "/kernels/XYZ"])
def test_bad_paging_and_states_are_422(api, url):
  r = api.get(url, headers=SUB)
  assert r.status_code == 422 and r.json()["detail"][0]["loc"][0] in ("query", "path"), r.text


@pytest.mark.parametrize("url", ["/v1/workers", "/v1/jobs"])
def test_reads_need_a_token_like_the_other_reads(api, url):
  assert api.get(url).status_code == 401
  assert api.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401
  assert api.get(url, headers=WRK).status_code == 200


def test_the_pages_and_their_files_are_served_without_a_token(api):
  for url in ["/", "/models", "/workers", "/queue", f"/kernels/{'0' * 64}"]:
    r = api.get(url)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), url
    assert "default-src 'self'" in r.headers["content-security-policy"]
  js = api.get("/static/uPlot.iife.min.js")
  assert js.status_code == 200 and js.text.startswith("/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
  assert api.get("/static/dashboard.js").status_code == 200 and api.get("/static/../api/auth.py").status_code == 404
  assert "/" not in api.get("/openapi.json").json()["paths"]


def test_a_kernel_carries_its_winning_source(api):
  job, = submit(api, examples()[:1])
  wid = register(api)
  claim(api, wid)
  report(api, wid, job)
  res, = api.get(f"/v1/kernels/{job['kernel_key']}", headers=SUB).json()["results"]  # its confirmation is still queued
  assert res["best_source"] == "void kernel(float* restrict data0) { }"


# the curve's colours in kernel.js; a canvas pixel of exactly that colour was drawn by that series
BEST, EACH = (0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e)
PIXELS = """([r, g, b]) => {
  const c = document.querySelector("#curve canvas"), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0, lo = c.width, hi = -1;
  for (let i = 0; i < d.length; i += 4) if (d[i] === r && d[i + 1] === g && d[i + 2] === b && d[i + 3] === 255) {
    n++; const x = (i / 4) % c.width; lo = Math.min(lo, x); hi = Math.max(hi, x);
  }
  return {n, span: (hi - lo + 1) / c.width};
}"""


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing: `make test` installs Debian's chromium (as root)")
@pytest.mark.slow
def test_the_dashboard_in_headless_chromium(server, tmp_path):
  from playwright.sync_api import expect, sync_playwright
  ks = examples()[:3]
  with httpx.Client(base_url=server) as http:
    jobs = submit(http, ks)
    wid = register(http, "cpu-test")
    for j, best_s in zip(jobs[:2], (2e-4, 3e-3)):
      claim(http, wid)
      assert report(http, wid, j, best_s=best_s).status_code == 200
      confirm(http, wid, j, best_s=best_s)
    claim(http, wid)  # the third one is being searched
  errors = []
  with sync_playwright() as p:
    browser = chromium(p, tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(server + "/")
    page.fill("#token input", "sub")  # the server has tokens: the page asks for one
    page.press("#token input", "Enter")
    rows = page.locator("#kernels tbody tr")
    expect(rows).to_have_count(3)
    errors.clear()  # the 401 that asked for the token
    for k in ks: expect(page.locator("#kernels tbody")).to_contain_text(k.name)
    expect(page.locator("#kernels tbody")).to_contain_text("2.00×")
    expect(page.locator("#kernels tbody")).to_contain_text("running")
    page.screenshot(path=tmp_path / "kernels.png", full_page=True)
    page.fill("#filters input[name=name]", ks[1].name)
    expect(rows).to_have_count(1)

    page.click(f"a[href='/kernels/{ks[1].key}']")
    expect(page.locator("#candidates tbody tr")).to_have_count(6)
    expect(page.locator("#candidates tbody tr.winner")).to_have_count(1)
    expect(page.locator("#source")).to_have_text("void kernel(float* restrict data0) { }")
    expect(page.locator("#summary")).to_contain_text("2.00×")
    page.wait_for_function("document.querySelector('#curve canvas') !== null")
    best, each = page.evaluate(PIXELS, BEST), page.evaluate(PIXELS, EACH)
    assert best["n"] > 100 and best["span"] > 0.5, best  # the best-so-far line runs across the plot
    assert each["n"] > 4 * 10, each                        # a dot per timed candidate (4 of the 6 have runs)
    shot = tmp_path / "kernel.png"
    page.screenshot(path=shot, full_page=True)

    page.click("header nav a[href='/workers']")
    expect(page.locator("#workers tbody")).to_contain_text("cpu-test")
    expect(page.locator("#workers tbody")).to_contain_text(ks[2].name)
    page.click("header nav a[href='/models']")
    expect(page.locator("#models tbody")).to_contain_text("no models")
    page.click("header nav a[href='/queue']")
    expect(page.locator("#counts")).to_contain_text("done 4")  # two searches and their two confirmations
    expect(page.locator("#queue tbody tr")).to_have_count(5)
    browser.close()
  assert errors == []
  print(f"\ndashboard screenshots: {tmp_path / 'kernels.png'} {shot}")


def test_the_api_docs_page_loads_nothing_from_another_origin(api):
  html = api.get("/docs").text
  assets = re.findall(r"""(?:src|href)=["']?([^"' >]+)""", html) + re.findall(r"""url: ?['"]([^'"]+)""", html)
  assert len(assets) >= 4 and all(a.startswith("/") for a in assets), assets  # the script, the style, the icon, the schema
  for a in assets: assert api.get(a).status_code == 200, a
  assert api.get("/redoc").status_code == 404  # ReDoc would come from a CDN: not offered


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing: `make test` installs Debian's chromium (as root)")
@pytest.mark.slow
def test_the_api_docs_render_in_headless_chromium_with_no_network(server, tmp_path):
  from playwright.sync_api import expect, sync_playwright
  elsewhere, errors = [], []
  with sync_playwright() as p:
    browser = chromium(p, tmp_path)
    page = browser.new_page()
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server)
               else (elsewhere.append(route.request.url), route.abort()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/docs")
    expect(page.locator(".opblock-summary-path", has_text="/v1/kernels").first).to_be_visible(timeout=30_000)
    assert page.locator(".opblock").count() >= 15
    browser.close()
  assert elsewhere == [] and errors == []


def test_a_worker_silent_past_the_offline_time_shows_offline(tmp_path):
  from test_api import make_client
  with make_client(tmp_path, worker_offline_s=0.5) as api:
    job, = submit(api, examples()[:1])
    _, busy = register(api, "quiet"), register(api, "busy")
    assert claim(api, busy, lease_s=60)["job_id"] == job["job_id"]
    import time
    time.sleep(1)
    states = {w["name"]: w["state"] for w in api.get("/v1/workers", headers=SUB).json()["workers"]}
    assert states == {"quiet": "offline", "busy": "busy"}  # its lease still holds: searching, not dead
