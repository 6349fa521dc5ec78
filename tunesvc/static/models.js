// Models: each captured model's kernels grouped, with how far their tuning is; ?model=NAME lists that model's kernels
// (its 500 most-run: a model may have any number).
"use strict";
const LIMIT = 50;

async function load() {
  const p = params(), page = await api(`/v1/models?${new URLSearchParams({limit: LIMIT, offset: p.offset ?? 0})}`);
  const pick = name => el("a", {href: `?${new URLSearchParams({model: name})}`}, name);
  fill(document.querySelector("#models tbody"), page.models, m => [pick(m.model), m.kernels, m.runs,
    ...["done", "running", "queued", "failed"].map(s => m.states[s] ?? 0)], () => null, "no models: tunesvc tune model.jsonl --server URL");
  pager(document.getElementById("pager"), +(p.offset ?? 0), LIMIT, page.next_offset, offset => { setParams({...params(), offset}); load(); });
  if (!p.model) return;
  const m = await api(`/v1/models/${encodeURIComponent(p.model)}?limit=500`);
  document.getElementById("title").replaceChildren(`kernels of ${m.model}` + (m.next_offset === null ? "" : ` (its ${m.detail.length} most-run)`));
  for (const id of ["title", "kernels"]) document.getElementById(id).hidden = false;
  fill(document.querySelector("#kernels tbody"), m.detail, k => [kernelLink(k.key, k.name), k.runs, stateTag(k.state)]);
}
poll(load);
