// One kernel: its jobs, and for a chosen result the search curve, the winner (opts and source) and every candidate.
"use strict";
const KEY = location.pathname.split("/").pop();
const BEST = "#1f77b4", EACH = "#ff7f0e";  // the test finds the curve by these colours on the canvas
let shown = "", chart = null;

async function load() {
  const k = await api(`/v1/kernels/${KEY}`), text = JSON.stringify(k);
  if (text === shown) return;  // unchanged: redrawing would only make the chart flicker
  shown = text;
  document.title = `tunesvc · ${k.name || short(k.key)}`;
  document.getElementById("name").textContent = k.name || "(unnamed kernel)";
  document.getElementById("facts").replaceChildren("key ", el("code", {}, k.key), ` · ${(k.flops / 1e6).toFixed(2)} MFLOP · ${(k.bytes / 1e6).toFixed(2)} MB`);
  fill(document.querySelector("#jobs tbody"), k.jobs, j => [j.job_id, j.device, stateTag(j.state), `${j.attempts} / ${j.max_attempts}`,
       el("code", {}, JSON.stringify(j.settings)), j.error ? el("pre", {class: "error"}, j.error.trim()) : ""]);
  document.getElementById("result").hidden = !k.results.length;
  if (!k.results.length) return;
  // the fastest verified result first, then the others newest first
  const results = [...k.results].sort((a, b) => (b.verified - a.verified) || (a.verified ? a.best_s - b.best_s : b.created - a.created));
  const pick = document.getElementById("pick"), was = pick.value;
  pick.replaceChildren(...results.map(r => el("option", {value: r.result_id},
    `job ${r.job_id} on ${short(r.fingerprint)}: ${secs(r.best_s)}${r.verified ? "" : " (unverified)"}`)));
  if (results.some(r => `${r.result_id}` === was)) pick.value = was;
  pick.onchange = () => result(k, results.find(r => `${r.result_id}` === pick.value));
  result(k, results.find(r => `${r.result_id}` === pick.value));
}

function result(k, r) {
  document.getElementById("summary").replaceChildren(
    `baseline (hand-coded) ${secs(r.baseline_s)} → best ${secs(r.best_s)}: `, el("b", {}, `${r.speedup.toFixed(2)}×`),
    ` · ${rate(k.flops, k.bytes, r.best_s)} · ${r.verified ? "verified" : "NOT verified"} · ${r.measurements.length} candidates in ${r.search_s.toFixed(1)} s`,
    ` · action space v${r.action_space_version} · fingerprint `, el("code", {}, r.fingerprint), conditions(r.conditions));
  document.getElementById("opts").textContent = optsText(r.opts);
  document.getElementById("source").textContent = r.best_source;
  const winner = JSON.stringify(r.opts);
  fill(document.querySelector("#candidates tbody"), r.measurements.map((m, i) => [i + 1, m]), ([i, m]) => [
    i, m.round, el("code", {}, optsText(m.opts)), stateTag(m.status), m.error, secs(m.min_s), m.times.length, secs(m.compile_s)],
    ([, m]) => JSON.stringify(m.opts) === winner ? "winner" : null, "the search measured nothing");
  curve(document.getElementById("curve"), r.measurements);
}

// how the final check measured; a busy machine is said in bold: its timings were re-taken or the baseline kept
function conditions(c) {
  if (c?.other_load === undefined) return "";
  const text = `other load ${c.other_load.toFixed(2)} cores, drift ${(100 * c.drift).toFixed(0)}%, spread ${c.spread?.toFixed(2) ?? "–"}×` +
    (c.retimed ? `, re-timed ${c.retimed}×` : "") +
    (c.roofline?.ended ? `, ended at the roofline (${secs(c.roofline.best_s)} against ${secs(c.roofline.stream_s)} streaming its ${(c.roofline.moved / 1e6).toFixed(1)} MB)` : "");
  return c.busy ? el("span", {}, " · ", el("b", {}, "measured on a busy machine"), ` (${text})`) : ` · ${text}`;
}

// x: candidates measured so far; y (log): each candidate's fastest run, and the fastest verified one up to there
function curve(node, ms) {
  let best = null;
  const bests = ms.map(m => m.status === "ok" && m.verified && m.min_s !== null && (best === null || m.min_s < best) ? (best = m.min_s) : best);
  const data = [ms.map((_, i) => i + 1), bests, ms.map(m => m.min_s)];
  chart?.destroy();
  chart = new uPlot({
    width: node.clientWidth, height: 320, scales: {x: {time: false}, y: {distr: 3}},
    series: [{label: "candidate"},
             {label: "fastest verified so far", stroke: BEST, width: 2, paths: uPlot.paths.stepped({align: 1}), points: {show: false}, value: (u, v) => secs(v)},
             {label: "candidate's fastest run", stroke: EACH, fill: null, paths: () => null, points: {show: true, size: 7, fill: EACH}, value: (u, v) => secs(v)}],
    axes: [{label: "candidates measured", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]},
           {label: "time", size: 70, values: (u, vs) => vs.map(v => v === null ? "" : secs(v))}],  // null: an unlabelled log tick
  }, data, node);
}
poll(load);
