// Workers: what each one runs on and is doing; one silent for two minutes is greyed out (it may have died).
"use strict";
const LIMIT = 50, SILENT_S = 120;

async function load() {
  const p = params(), page = await api(`/v1/workers?${new URLSearchParams({...p, limit: LIMIT})}`);
  fill(document.querySelector("#workers tbody"), page.workers,
       w => [w.worker_id, w.name, w.device, el("code", {title: w.fingerprint}, short(w.fingerprint)), ago(page.now, w.last_heartbeat),
             stateTag(w.state), w.job_id ? [`job ${w.job_id}: `, kernelLink(w.kernel_key, w.kernel_name)] : "–"],
       w => page.now - w.last_heartbeat > SILENT_S ? "silent" : null, "no worker has registered");
  pager(document.getElementById("pager"), +(p.offset ?? 0), LIMIT, page.next_offset, offset => { setParams({offset}); load(); });
}
poll(load);
