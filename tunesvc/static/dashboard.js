// What every page shares: the header, the API with the saved token, DOM and number formatting, a poll loop.
// Data from the API only ever becomes text (textContent), never markup.
"use strict";
const TOKEN = "tunesvc.token";
const PAGES = [["/", "kernels"], ["/models", "models"], ["/workers", "workers"], ["/queue", "queue"]];

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v);
  }
  e.append(...kids.flat().filter(k => k !== null && k !== undefined).map(k => k instanceof Node ? k : String(k)));
  return e;
}

// replace a tbody's rows: cells(item) gives the cells of one row (strings or nodes), cls(item) its class
function fill(tbody, items, cells, cls = () => null, empty = "nothing yet") {
  const cols = tbody.closest("table").querySelectorAll("thead th").length;
  tbody.replaceChildren(...(items.length ? items.map(x => el("tr", {class: cls(x)}, cells(x).map(c => el("td", {}, c))))
                                         : [el("tr", {}, el("td", {colspan: cols, class: "empty"}, empty))]));
}

class ApiError extends Error {}

async function api(path) {
  const token = localStorage.getItem(TOKEN);
  const r = await fetch(path, {headers: token ? {Authorization: `Bearer ${token}`} : {}});
  const body = await r.json().catch(() => null);
  if (r.status === 401 || r.status === 403) document.getElementById("token").hidden = false;
  if (!r.ok) throw new ApiError(`${r.status}: ${typeof body?.detail === "string" ? body.detail : JSON.stringify(body?.detail ?? r.statusText)}`);
  return body;
}

const short = h => h ? h.slice(0, 12) : "";
function secs(s) {
  if (s === null || s === undefined) return "–";
  const [v, unit] = s < 1e-3 ? [s * 1e6, "µs"] : s < 1 ? [s * 1e3, "ms"] : [s, "s"];
  return `${v.toPrecision(3)} ${unit}`;
}
// what limits a kernel: arithmetic when it does at least a FLOP per byte moved, memory otherwise
const rate = (flops, bytes, s) => !s ? "–" : flops >= bytes ? `${(flops / s / 1e9).toFixed(1)} GFLOP/s` : `${(bytes / s / 1e9).toFixed(1)} GB/s`;
const optsText = opts => opts.map(o => `${o.op}${o.axis === null ? "" : o.axis}:${o.amt}`).join(" ") || "(none)";
function ago(now, t) {
  if (!t) return "–";
  const d = Math.max(0, now - t);
  return d < 120 ? `${d.toFixed(0)} s ago` : d < 7200 ? `${(d / 60).toFixed(0)} min ago` : `${(d / 3600).toFixed(1)} h ago`;
}
const kernelLink = (key, name) => el("a", {href: `/kernels/${key}`}, name || short(key));
const stateTag = s => el("span", {class: `state ${s}`}, s);

// the page's query string as an object, and writing it back without a reload
const params = () => Object.fromEntries(new URLSearchParams(location.search));
function setParams(p) {
  const q = new URLSearchParams(Object.entries(p).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  history.replaceState(null, "", q.toString() ? `?${q}` : location.pathname);
}

// prev/next buttons over a page of `limit` rows; go(offset) loads another page
function pager(node, offset, limit, next, go) {
  node.replaceChildren(
    el("button", {disabled: offset === 0, onclick: () => go(Math.max(0, offset - limit))}, "‹ prev"),
    el("span", {}, ` rows from ${offset + 1} `),
    el("button", {disabled: next === null, onclick: () => go(next)}, "next ›"));
}

// call load() now and `every` ms after each time it finishes (skipped while the tab is hidden); the header says how it went
function poll(load, every = 3000) {
  const status = document.getElementById("status");
  const tick = async () => {
    if (!document.hidden) try {
      await load();
      status.textContent = `updated ${new Date().toLocaleTimeString()}`;
      status.className = "";
    } catch (e) {
      status.textContent = e instanceof ApiError ? e.message : `${e}`;
      status.className = "error";
      if (!(e instanceof ApiError)) console.error(e);
    }
    setTimeout(tick, every);
  };
  tick();
}

function header() {
  const input = el("input", {type: "password", placeholder: "token", autocomplete: "off"});
  const form = el("form", {id: "token", hidden: true, onsubmit: e => {
    e.preventDefault();
    localStorage.setItem(TOKEN, input.value);
    location.reload();
  }}, "this server needs a token: ", input, el("button", {}, "use"));
  document.body.prepend(el("header", {},
    el("a", {href: "/", class: "brand"}, "tunesvc"),
    el("nav", {}, PAGES.map(([href, name]) => el("a", {href, class: location.pathname === href ? "here" : null}, name))),
    form, el("span", {id: "status"})));
}
header();
