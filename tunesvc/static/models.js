// Models: each captured model's kernels grouped, with how far their tuning is; ?model=NAME lists that model's kernels.
"use strict";

async function load() {
  const page = await api("/v1/models"), p = params();
  const pick = name => el("a", {href: `?${new URLSearchParams({model: name})}`}, name);
  fill(document.querySelector("#models tbody"), page.models, m => [pick(m.model), m.kernels, m.runs,
    ...["done", "running", "queued", "failed"].map(s => m.states[s] ?? 0)], () => null, "no models: tunesvc tune model.jsonl --server URL");
  if (!p.model) return;
  const m = await api(`/v1/models/${encodeURIComponent(p.model)}`);
  document.getElementById("title").replaceChildren(`kernels of ${m.model}`);
  for (const id of ["title", "kernels"]) document.getElementById(id).hidden = false;
  fill(document.querySelector("#kernels tbody"), m.detail, k => [kernelLink(k.key, k.name), k.runs, stateTag(k.state)]);
}
poll(load);
