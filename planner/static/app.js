// USL Search page: search form, results with evidence highlighting, explain, and a live
// status view. Plain browser JavaScript, no build step and no external libraries.
"use strict";

const $ = (id) => document.getElementById(id);
const encoder = new TextEncoder();
const decoder = new TextDecoder();
let lastRequest = null;

// The API key lives in this tab only (sessionStorage): never in the URL, never in localStorage,
// so it does not outlive the tab or travel in a shared search link.
const KEY_STORE = "usl.apiKey";

function authHeaders() {
  const key = $("apikey").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// Evidence offsets are UTF-8 byte offsets into the chunk text; JavaScript strings index
// UTF-16 code units. Decode the byte prefix to find the matching string index.
function byteToIndex(bytes, offset) {
  const clamped = Math.max(0, Math.min(offset, bytes.length));
  return decoder.decode(bytes.subarray(0, clamped)).length;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function highlighted(text, evidence) {
  const bytes = encoder.encode(text);
  const spans = (evidence || [])
    .map((e) => ({ from: byteToIndex(bytes, e.start), to: byteToIndex(bytes, e.end), e }))
    .filter((s) => s.to > s.from)
    .sort((a, b) => a.from - b.from);
  const pre = el("pre");
  let at = 0;
  spans.forEach((span, i) => {
    const from = Math.max(span.from, at);
    if (from >= span.to) return; // overlapping evidence: keep the first
    if (from > at) pre.append(text.slice(at, from));
    pre.append(el("mark", {
      class: i % 2 ? "ev alt" : "ev", title: `event ${span.e.eventId} · seq ${span.e.seq} · bytes ${span.e.start}–${span.e.end}`,
      "data-event-id": span.e.eventId, "data-seq": span.e.seq, "data-start": span.e.start, "data-end": span.e.end,
    }, text.slice(from, span.to)));
    at = span.to;
  });
  if (at < text.length) pre.append(text.slice(at));
  return pre;
}

function renderHit(hit) {
  const seqs = (hit.evidence || []).map((e) => e.seq);
  const seqText = seqs.length ? `seq ${Math.min(...seqs)}–${Math.max(...seqs)}` : "";
  const components = Object.entries(hit.score.components || {})
    .map(([source, c]) => `${source} #${c.rank}` + (c.score !== undefined ? ` (${Number(c.score).toFixed(3)})` : ""))
    .join(" · ");
  return el("li", { class: "hit", "data-chunk-id": hit.chunkId, "data-session-id": hit.sessionId, "data-origin": hit.origin },
    el("div", { class: "meta" },
      el("span", { class: "score" }, `rrf ${hit.score.rrf.toFixed(5)}`),
      el("span", { class: "origin" }, hit.origin || ""),
      el("span", null, `session ${hit.sessionId}`),
      hit.turnId ? el("span", null, `turn ${hit.turnId}`) : null,
      el("span", null, seqText),
      el("span", null, hit.eventTime)),
    highlighted(hit.text || "", hit.evidence),
    el("div", { class: "components" }, components));
}

function table(headers, rows) {
  return el("table", null,
    el("thead", null, el("tr", null, ...headers.map((h) => el("th", null, h)))),
    el("tbody", null, ...rows.map((row) => el("tr", null, ...row.map((cell) => el("td", null, cell))))));
}

function renderExplain(explain) {
  const f = explain.freshness || {};
  const parts = [
    el("p", null, `mode ${f.mode} · label ${f.label} · asOfSeq ${f.asOfSeq} · L1 ${f.l1CommittedSeq} · ` +
      `indexes through ${f.indexThroughSeq}` + (f.timedOut ? " · wait timed out" : "")),
  ];
  if ((f.reasons || []).length) parts.push(el("ul", { class: "reasons" }, ...f.reasons.map((r) => el("li", null, r))));
  for (const fallback of explain.fallbacks || []) parts.push(el("p", { class: "fallback" }, `fallback: ${fallback}`));
  const generations = Object.entries(explain.generations || {});
  if (generations.length) {
    parts.push(el("h4", null, "Generations read"), table(["index", "generation", "built through"],
      generations.map(([kind, g]) => [kind, g && g.generationId !== undefined ? String(g.generationId) : "–",
        g && g.builtThroughSeq !== undefined ? String(g.builtThroughSeq) : "–"])));
  }
  const sources = Object.entries(explain.sources || {});
  if (sources.length) {
    parts.push(el("h4", null, "Sources"), table(["source", "window", "returned", "truncated"],
      sources.map(([name, src]) => [name, String(src.window), String(src.returned), src.truncated ? "yes" : "no"])));
  }
  const hits = explain.hits || [];
  if (hits.length) {
    parts.push(el("h4", null, `Ranking (${(explain.ranking || {}).method || "rrf"})`), table(["#", "chunk", "origin", "rrf", "source ranks"],
      hits.map((h, i) => [String(i + 1), h.chunkId, h.origin, h.rrfExact || String(h.rrf),
        Object.entries(h.components || {}).map(([src, c]) => `${src} #${c.rank}`).join(", ")])));
  }
  parts.push(el("details", { class: "raw" }, el("summary", null, "raw JSON"), el("pre", null, JSON.stringify(explain, null, 2))));
  $("explain-body").replaceChildren(...parts);
}

function freshnessLine(body) {
  const f = body.freshness;
  const parts = [`asOfSeq ${body.asOfSeq}`, `label ${f.label}`, `L1 ${f.l1CommittedSeq}`];
  for (const [kind, wm] of Object.entries(f.watermarks || {})) {
    parts.push(wm ? `${kind} gen ${wm.generationId} @ ${wm.builtThroughSeq}` : `${kind} missing`);
  }
  if (f.tailScan) parts.push(`tail scan ${f.tailScan.fromSeq}..${f.tailScan.toSeq}`);
  parts.push((f.uncovered || []).length
    ? "uncovered " + f.uncovered.map((r) => `${r.fromSeq}..${r.toSeq}`).join(", ")
    : "nothing uncovered");
  for (const fallback of f.fallbacks || []) parts.push(`fallback: ${fallback}`);
  const line = $("freshness-line");
  line.textContent = parts.join(" · ");
  line.classList.toggle("partial", f.label.endsWith("-partial"));
  line.hidden = false;
}

async function search(cursor) {
  document.body.dataset.search = "running";
  const request = cursor ? { ...lastRequest, cursor } : {
    query: $("query").value,
    freshness: $("freshness").value,
    mode: $("mode").value,
    k: Number($("k").value) || 10,
    log: $("log").value || "default",
    explain: $("explain").checked,
    toolResults: $("toolResults").checked,
  };
  if (!cursor) lastRequest = request;
  const headers = { "Content-Type": "application/json", ...authHeaders() };
  if ($("principal").value.trim()) headers["X-USL-Principal"] = $("principal").value.trim();
  $("error").hidden = true;
  const response = await fetch("/v1/search", { method: "POST", headers, body: JSON.stringify(request) });
  const body = await response.json();
  if (!response.ok) {
    const e = body.error || {};
    $("error").textContent = `${e.status || response.status} ${e.code || ""}: ${e.message || "request failed"}` +
      (e.hint ? ` — ${e.hint}` : "");
    $("error").hidden = false;
    document.body.dataset.search = "error";
    return;
  }
  if (!cursor) $("results").replaceChildren();
  freshnessLine(body);
  for (const hit of body.results) $("results").append(renderHit(hit));
  if (!cursor && body.results.length === 0) $("results").append(el("li", { class: "muted" }, "No results."));
  const more = $("more");
  more.hidden = !body.cursor;
  more.onclick = () => search(body.cursor);
  const panel = $("explain-panel");
  panel.hidden = !body.explain;
  if (body.explain) renderExplain(body.explain);
  document.body.dataset.search = "done";
}

// --- status view: watermark and lag per index, with a small lag chart over time -----------

const lagHistory = new Map(); // "log/kind" -> [{t, lag}]
const HISTORY_POINTS = 90;

function sparkline(points) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 100 28");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("class", "lag-chart");
  svg.dataset.points = String(points.length);
  if (points.length < 2) return svg;
  const max = Math.max(1, ...points.map((p) => p.lag));
  // The polls so far span the width; once HISTORY_POINTS are kept, the chart scrolls.
  const step = 100 / (points.length - 1);
  const xy = points.map((p, i) => [(i * step).toFixed(2), (26 - 24 * p.lag / max).toFixed(2)]);
  const d = xy.map(([x, y], i) => `${i ? "L" : "M"}${x},${y}`).join(" ");
  const area = document.createElementNS("http://www.w3.org/2000/svg", "path");
  area.setAttribute("d", `${d} L${xy[xy.length - 1][0]},28 L${xy[0][0]},28 Z`);
  area.setAttribute("class", "area");
  svg.append(area);
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", d);
  path.setAttribute("class", "line");
  svg.dataset.maxLag = String(max);
  svg.append(path);
  const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
  title.textContent = `lag over the last ${points.length} polls (max ${max} seqs)`;
  svg.append(title);
  return svg;
}

function renderStatus(report) {
  const root = $("status");
  const now = Date.now();
  const blocks = [];
  for (const [logId, entry] of Object.entries(report.logs || {})) {
    const block = el("div", { class: "log-status" }, el("h3", null, `log ${logId} · L1 seq ${entry.l1CommittedSeq}`));
    for (const [kind, idx] of Object.entries(entry.indexes || {})) {
      const key = `${logId}/${kind}`;
      const points = lagHistory.get(key) || [];
      points.push({ t: now, lag: idx.lagSeqs || 0 });
      while (points.length > HISTORY_POINTS) points.shift();
      lagHistory.set(key, points);
      const figures = idx.generationId === null
        ? "no generation yet"
        : `gen ${idx.generationId} · through ${idx.builtThroughSeq} · lag ${idx.lagSeqs} seqs` +
          (idx.lagSeconds === null || idx.lagSeconds === undefined ? "" : ` / ${Number(idx.lagSeconds).toFixed(1)} s`);
      const peak = Math.max(0, ...points.map((p) => p.lag));
      const seconds = Math.round((points[points.length - 1].t - points[0].t) / 1000);
      block.append(el("div", {
        class: "index-row", "data-log": logId, "data-kind": kind, "data-generation": idx.generationId,
        "data-built-through": idx.builtThroughSeq, "data-lag-seqs": idx.lagSeqs,
      },
      el("span", { class: "name" }, kind),
      sparkline(points),
      el("span", { class: "figures" }, figures),
      el("span", { class: "peak" }, `lag chart: last ${seconds} s, peak ${peak} seqs`)));
    }
    blocks.push(block);
  }
  if (!blocks.length) blocks.push(el("p", { class: "muted" }, "No logs yet: ingest something with usl ingest PATH."));
  root.replaceChildren(...blocks);
  root.dataset.polls = String(Number(root.dataset.polls || 0) + 1);
  $("status-updated").textContent = new Date(now).toLocaleTimeString();
}

async function pollStatus() {
  try {
    const response = await fetch("/v1/status", { headers: authHeaders() });
    const body = await response.json();
    if (response.ok) renderStatus(body);
    else $("status-updated").textContent = (body.error && body.error.message) || "status unavailable";
  } catch (err) {
    $("status-updated").textContent = "status unavailable";
  } finally {
    setTimeout(pollStatus, 2000);
  }
}

function run() {
  search(null).catch((err) => {
    $("error").textContent = `request failed: ${err}`;
    $("error").hidden = false;
    document.body.dataset.search = "error";
  });
}

// A search is a link: ?q=QUERY&freshness=latest&mode=text&k=5&log=default&explain=1&toolResults=1&as=PRINCIPAL
const URL_FIELDS = { q: "query", freshness: "freshness", mode: "mode", k: "k", log: "log", as: "principal" };
const URL_CHECKS = { explain: "explain", toolResults: "toolResults" };

function fromUrl() {
  const params = new URLSearchParams(window.location.search);
  for (const [param, id] of Object.entries(URL_FIELDS)) {
    const value = params.get(param);
    if (value === null) continue;
    const field = $(id);
    if (field.tagName === "SELECT" && ![...field.options].some((o) => o.value === value)) {
      field.append(el("option", { value }, value)); // e.g. wait:12
    }
    field.value = value;
  }
  for (const [param, id] of Object.entries(URL_CHECKS)) {
    if (params.has(param)) $(id).checked = !["0", "false", "no"].includes(params.get(param));
  }
  return Boolean(params.get("q"));
}

function toUrl() {
  const params = new URLSearchParams();
  for (const [param, id] of Object.entries(URL_FIELDS)) {
    const value = $(id).value.trim();
    if (value) params.set(param, value);
  }
  for (const [param, id] of Object.entries(URL_CHECKS)) if ($(id).checked) params.set(param, "1");
  window.history.replaceState(null, "", `${window.location.pathname}?${params}`);
}

function rememberKey() {
  const key = $("apikey").value.trim();
  if (key) sessionStorage.setItem(KEY_STORE, key);
  else sessionStorage.removeItem(KEY_STORE);
}

$("apikey").value = sessionStorage.getItem(KEY_STORE) || "";
$("apikey").addEventListener("change", rememberKey);

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  rememberKey();
  toUrl();
  run();
});
document.body.dataset.search = "idle";
if (fromUrl()) run();
pollStatus();
