// USL Search page: search form, results with evidence highlighting, explain, and a live
// status view. Plain browser JavaScript, no build step and no external libraries.
"use strict";

const $ = (id) => document.getElementById(id);
const encoder = new TextEncoder();
const decoder = new TextDecoder();
let lastRequest = null;

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
    pre.append(el("mark", { class: i % 2 ? "ev alt" : "ev", title: `event ${span.e.eventId} · seq ${span.e.seq}` },
      text.slice(from, span.to)));
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
  return el("li", { class: "hit" },
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
  const headers = { "Content-Type": "application/json" };
  if ($("principal").value.trim()) headers["X-USL-Principal"] = $("principal").value.trim();
  $("error").hidden = true;
  const response = await fetch("/v1/search", { method: "POST", headers, body: JSON.stringify(request) });
  const body = await response.json();
  if (!response.ok) {
    const e = body.error || {};
    $("error").textContent = `${e.status || response.status} ${e.code || ""}: ${e.message || "request failed"}` +
      (e.hint ? ` — ${e.hint}` : "");
    $("error").hidden = false;
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
  if (body.explain) $("explain-body").textContent = JSON.stringify(body.explain, null, 2);
}

// --- status view: watermark and lag per index, with a small lag chart over time -----------

const history = new Map(); // "log/kind" -> [{t, lag}]
const HISTORY_POINTS = 90;

function sparkline(points) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 100 28");
  svg.setAttribute("preserveAspectRatio", "none");
  if (points.length < 2) return svg;
  const max = Math.max(1, ...points.map((p) => p.lag));
  const step = 100 / (HISTORY_POINTS - 1);
  const offset = 100 - step * (points.length - 1);
  const d = points.map((p, i) => `${i ? "L" : "M"}${(offset + i * step).toFixed(2)},${(26 - 24 * p.lag / max).toFixed(2)}`).join(" ");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", d);
  path.setAttribute("class", "line");
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
      const points = history.get(key) || [];
      points.push({ t: now, lag: idx.lagSeqs || 0 });
      while (points.length > HISTORY_POINTS) points.shift();
      history.set(key, points);
      const figures = idx.generationId === null
        ? "no generation yet"
        : `gen ${idx.generationId} · through ${idx.builtThroughSeq} · lag ${idx.lagSeqs} seqs` +
          (idx.lagSeconds === null || idx.lagSeconds === undefined ? "" : ` / ${Number(idx.lagSeconds).toFixed(1)} s`);
      block.append(el("div", { class: "index-row" },
        el("span", { class: "name" }, kind), sparkline(points), el("span", { class: "figures" }, figures)));
    }
    blocks.push(block);
  }
  if (!blocks.length) blocks.push(el("p", { class: "muted" }, "No logs yet: ingest something with usl ingest PATH."));
  root.replaceChildren(...blocks);
  $("status-updated").textContent = new Date(now).toLocaleTimeString();
}

async function pollStatus() {
  try {
    const response = await fetch("/v1/status");
    const body = await response.json();
    if (response.ok) renderStatus(body);
    else $("status-updated").textContent = (body.error && body.error.message) || "status unavailable";
  } catch (err) {
    $("status-updated").textContent = "status unavailable";
  } finally {
    setTimeout(pollStatus, 2000);
  }
}

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  search(null).catch((err) => {
    $("error").textContent = `request failed: ${err}`;
    $("error").hidden = false;
  });
});
pollStatus();
