// Kernels: a row per (kernel, job) with its best result; filters and the page live in the query string.
"use strict";
const LIMIT = 50, FILTERS = ["name", "state", "device"];
const form = document.getElementById("filters");
let latest = 0;  // a slow answer must not overwrite a newer one

async function load() {
  const p = params(), n = ++latest;
  const page = await api(`/v1/kernels?${new URLSearchParams({...p, limit: LIMIT})}`);
  if (n !== latest) return;
  // a row per search; a confirm job (a second measurement of a search's result) shows on the kernel's own page
  const searches = k => k.jobs.filter(j => j.kind !== "confirm");
  const rows = page.kernels.flatMap(k => searches(k).length ? searches(k).map(j => [k, j]) : [[k, null]]);
  fill(document.querySelector("#kernels tbody"), rows, ([k, j]) => {
    const r = j?.result;
    return [kernelLink(k.key, k.name), el("code", {}, short(k.key)), j?.device ?? "–", r ? el("code", {}, short(r.fingerprint)) : "–",
            j ? stateTag(j.state) : "–", secs(r?.baseline_s), secs(r?.best_s), r ? `${r.speedup.toFixed(2)}×` : "–", rate(k.flops, k.bytes, r?.best_s)];
  }, () => null, "no kernels match");
  pager(document.getElementById("pager"), +(p.offset ?? 0), LIMIT, page.next_offset, offset => { setParams({...params(), offset}); load(); });
}

for (const f of FILTERS) form.elements[f].value = params()[f] ?? "";
form.addEventListener("input", () => { setParams(Object.fromEntries(FILTERS.map(f => [f, form.elements[f].value]))); load(); });
form.addEventListener("submit", e => e.preventDefault());
poll(load);
