// Queue: jobs by state (queued ones in the order workers will claim them) with attempts and every failed attempt's reason.
"use strict";
const LIMIT = 50, STATES = ["queued", "running", "done", "failed"];

async function load() {
  const p = params(), page = await api(`/v1/jobs?${new URLSearchParams({...p, limit: LIMIT})}`);
  const total = Object.values(page.counts).reduce((a, b) => a + b, 0);
  const chip = (state, label, n) => el("button", {class: (p.state ?? "") === state ? "here" : null, onclick: () => { setParams({state}); load(); }},
                                      label, " ", el("b", {}, n));
  document.getElementById("counts").replaceChildren(chip("", "all", total), ...STATES.map(s => chip(s, s, page.counts[s] ?? 0)));
  fill(document.querySelector("#queue tbody"), page.jobs, j => [
    j.job_id, kernelLink(j.kernel_key, j.kernel_name), j.device, stateTag(j.state), j.priority, `${j.attempts} / ${j.max_attempts}`,
    j.worker_id ?? "–", new Date(j.created * 1000).toLocaleString(), j.finished ? new Date(j.finished * 1000).toLocaleString() : "–",
    j.error ? el("pre", {class: "error"}, j.error.trim()) : ""], () => null, "no jobs");
  pager(document.getElementById("pager"), +(p.offset ?? 0), LIMIT, page.next_offset, offset => { setParams({...params(), offset}); load(); });
}
poll(load);
