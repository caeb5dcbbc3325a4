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

// Headers of a request made as the page's principal (X-USL-Principal), with the API key if any.
function apiHeaders() {
  const headers = authHeaders();
  if ($("principal").value.trim()) headers["X-USL-Principal"] = $("principal").value.trim();
  return headers;
}

// datetime-local (read as UTC) -> RFC 3339.
function utc(value) {
  if (!value) return null;
  return (value.length === 16 ? `${value}:00` : value) + "Z";
}

// The structured filters of the search form, in the request's shape (absent when empty).
function searchFilters() {
  const filters = {};
  const text = { sessionId: "f-session", toolName: "f-tool", role: "f-role", status: "f-status" };
  for (const [name, id] of Object.entries(text)) {
    const value = $(id).value.trim();
    if (value) filters[name] = value;
  }
  if ($("f-from").value) filters.timeFrom = utc($("f-from").value);
  if ($("f-to").value) filters.timeTo = utc($("f-to").value);
  return filters;
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

// queryTerms and termRanges (where the query's words occur) come from terms.js.

// text[from, to) as nodes, the parts inside ranges wrapped in <mark class="term">.
function withTerms(text, from, to, ranges) {
  const nodes = [];
  let at = from;
  for (const [start, end] of ranges) {
    const a = Math.max(start, at);
    const b = Math.min(end, to);
    if (b <= a) continue;
    if (a > at) nodes.push(text.slice(at, a));
    nodes.push(el("mark", { class: "term" }, text.slice(a, b)));
    at = b;
  }
  if (at < to) nodes.push(text.slice(at, to));
  return nodes;
}

function highlighted(text, evidence, query) {
  const ranges = termRanges(text, query);
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
    }, ...withTerms(text, from, span.to, ranges)));
    at = span.to;
  });
  if (at < text.length) pre.append(text.slice(at));
  return pre;
}

function renderHit(hit, query, asOfSeq, log) {
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
      el("span", null, hit.eventTime),
      sessionButton(hit, asOfSeq, log)),
    highlighted(hit.text || "", hit.evidence, query),
    el("div", { class: "components" }, components));
}

// A number (2440, 0.25, an exact rrf 8579/139360) is never broken across lines, where a long
// id or text in the next cell may be: a narrow table wraps those and keeps figures whole.
const FIGURE = /^-?[0-9][0-9.,/e+-]*$/;

function table(headers, rows) {
  return el("table", null,
    el("thead", null, el("tr", null, ...headers.map((h) => el("th", null, h)))),
    el("tbody", null, ...rows.map((row) => el("tr", null,
      ...row.map((cell) => el("td", FIGURE.test(cell) ? { class: "figure" } : null, cell))))));
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
  // "nothing uncovered" is about the snapshot up to asOfSeq; events committed after it (an
  // indexed search while the indexes lag) were not searched either, and can be many.
  const newer = f.l1CommittedSeq - body.asOfSeq;
  if (newer > 0) {
    parts.push(`${newer} newer event${newer === 1 ? "" : "s"} in L1 not searched` +
      (f.mode === "latest" ? "" : " (freshness latest searches them)"));
  }
  for (const fallback of f.fallbacks || []) parts.push(`fallback: ${fallback}`);
  const line = $("freshness-line");
  line.textContent = parts.join(" · ");
  line.classList.toggle("partial", f.label.endsWith("-partial"));
  line.hidden = false;
}

// An answer's JSON, or for a body that is not JSON (a proxy's HTML 502, a cut connection) an
// error in the API's shape saying what came instead: never a bare "SyntaxError: Unexpected token".
async function answerOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (response.ok || (body && body.error)) return body;
  } catch (err) { /* not JSON: described below */ }
  const type = (response.headers.get("Content-Type") || "no content type").split(";")[0];
  return { error: {
    status: response.status, code: response.ok ? "not_json" : (response.statusText || "error"),
    message: `the server answered with ${type}${text ? "" : " (empty)"} instead of the API's JSON`,
    hint: "Is the page served by the planner API, or by a proxy in front of it that failed?",
  } };
}

function errorText(e, status) {
  return `${e.status || status} ${e.code || ""}: ${e.message || "request failed"}` + (e.hint ? ` — ${e.hint}` : "");
}

// Each new search is numbered; an answer (or a next page) of an older one that arrives after a
// newer search started is dropped, so the results always belong to the query in the form.
let searchNumber = 0;

async function search(cursor) {
  const mine = cursor ? searchNumber : ++searchNumber;
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
  if (!cursor) {
    const filters = searchFilters();
    if (Object.keys(filters).length) request.filters = filters;
    lastRequest = request;
  }
  const headers = { "Content-Type": "application/json", ...apiHeaders() };
  $("error").hidden = true;
  const response = await fetch("/v1/search", { method: "POST", headers, body: JSON.stringify(request) });
  const body = await answerOf(response);
  if (mine !== searchNumber) return;
  if (body.error) {
    $("error").textContent = errorText(body.error, response.status);
    $("error").hidden = false;
    if (!cursor) {
      // The last search's results are not this one's: leave none on the page under its error.
      $("results").replaceChildren();
      $("freshness-line").hidden = true;
      $("meaning-only").hidden = true;
      $("explain-panel").hidden = true;
    }
    $("more").hidden = true;
    document.body.dataset.search = "error";
    return;
  }
  if (!cursor) $("results").replaceChildren();
  freshnessLine(body);
  for (const hit of body.results) $("results").append(renderHit(hit, request.query, body.asOfSeq, request.log));
  if (!cursor && body.results.length === 0) $("results").append(el("li", { class: "muted" }, "No results."));
  // In hybrid mode the vector index always has nearest neighbours, so a query whose words occur
  // nowhere still fills the page; say so instead of letting them pass for matches.
  if (!cursor) {
    $("meaning-only").hidden = request.mode === "vector" || body.results.length === 0
      || !body.results.every((hit) => Object.keys(hit.score.components || {}).every((source) => source === "vector"));
  }
  // The last page of a search cut at the rank depth says so (and how to reach the rest), not
  // just ends: "text had more matches; refine the query or add filters to reach them".
  if (!body.cursor && body.end && body.end.message) {
    $("results").append(el("li", { class: "muted results-end", "data-reason": body.end.reason }, body.end.message));
  }
  const more = $("more");
  more.hidden = !body.cursor;
  more.onclick = () => search(body.cursor).catch((err) => failed(err, mine));
  const panel = $("explain-panel");
  panel.hidden = !body.explain;
  if (body.explain) renderExplain(body.explain);
  document.body.dataset.search = "done";
}

// --- session view: a hit's session as a timeline around it -------------------------------

const SESSION_CONTEXT = 12; // events shown before the first and after the last evidence event

function showSession(hit, asOfSeq, log, whole) {
  openSession(hit, asOfSeq, log, whole).catch((err) => {
    $("session-error").textContent = `request failed: ${err}`;
    $("session-error").hidden = false;
    document.body.dataset.session = "error";
  });
}

function sessionButton(hit, asOfSeq, log) {
  const button = el("button", { type: "button", class: "open-session", "data-session-id": hit.sessionId },
    "open session");
  button.addEventListener("click", () => showSession(hit, asOfSeq, log, false));
  return button;
}

function eventText(fields) {
  for (const key of ["text", "summary", "title", "content"]) {
    if (typeof fields[key] === "string" && fields[key]) return fields[key];
  }
  return null;
}

function renderEvent(event, evidenceIds) {
  const fields = event.fields || {};
  const evidence = evidenceIds.has(event.eventId);
  const head = [event.type, event.role, fields.toolName, fields.status].filter(Boolean).join(" · ");
  const time = el("span", { class: "time" }, event.time || "");
  const tool = event.type === "tool.call" || event.type === "tool.result";
  const classes = ["event", tool ? "tool" : "", evidence ? "evidence" : "", fields.status === "error" ? "failed" : ""];
  const item = el("li", {
    class: classes.filter(Boolean).join(" "), "data-event-id": event.eventId, "data-type": event.type,
    "data-evidence": evidence ? "1" : null,
  });
  if (tool) {
    // Tool calls and results are folded: one line each, their fields a click away.
    const text = eventText(fields);
    item.append(el("details", null,
      el("summary", null, el("span", { class: "event-head" }, head), " ", time,
        text ? el("span", { class: "excerpt" }, ` ${excerpt(text, 100)}`) : null),
      el("pre", null, JSON.stringify(fields, null, 2))));
  } else {
    const text = eventText(fields);
    item.append(el("div", null, el("span", { class: "event-head" }, head), " ", time));
    if (text) item.append(el("pre", null, text));
  }
  return item;
}

// The session is read from the log its hit came from, at the search's asOfSeq: the Log field
// may have been changed since, and asOfSeq is a position in that log only.
async function openSession(hit, asOfSeq, log, whole) {
  document.body.dataset.session = "loading";
  $("session-error").hidden = true;
  const params = new URLSearchParams({
    what: "sessions", sessionId: hit.sessionId, log, asOfSeq: String(asOfSeq),
  });
  const response = await fetch(`/v1/export?${params}`, { headers: apiHeaders() });
  const text = await response.text();
  if (!response.ok) {
    let e = {};
    try { e = JSON.parse(text).error || {}; } catch (err) { /* not the error shape */ }
    $("session-error").textContent = errorText(e, response.status);
    $("session-error").hidden = false;
    document.body.dataset.session = "error";
    return;
  }
  const events = text.split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
  const evidenceIds = new Set((hit.evidence || []).map((e) => e.eventId));
  const marked = events.map((e, i) => (evidenceIds.has(e.eventId) ? i : -1)).filter((i) => i >= 0);
  let from = 0;
  let to = events.length;
  if (!whole && marked.length) {
    from = Math.max(0, Math.min(...marked) - SESSION_CONTEXT);
    to = Math.min(events.length, Math.max(...marked) + SESSION_CONTEXT + 1);
  }
  const view = $("session-view");
  view.dataset.sessionId = hit.sessionId;
  view.dataset.events = String(events.length);
  $("session-title").textContent = `Session ${hit.sessionId}`;
  $("session-line").textContent = `asOfSeq ${asOfSeq} · ${events.length} events · showing ${events.length ? from + 1 : 0}–${to}` +
    ` · ${marked.length} evidence event${marked.length === 1 ? "" : "s"} of this hit marked`;
  $("timeline").replaceChildren(...events.slice(from, to).map((event) => renderEvent(event, evidenceIds)));
  const all = $("session-all");
  all.hidden = from === 0 && to === events.length;
  all.onclick = () => showSession(hit, asOfSeq, log, true);
  view.hidden = false;
  const first = document.querySelector("#timeline li.evidence");
  (first || view).scrollIntoView({ block: "center" });
  document.body.dataset.session = "done";
}

$("session-close").addEventListener("click", () => { $("session-view").hidden = true; });

// --- SQL and SessionQL tabs -------------------------------------------------------------------

function cellText(value) {
  if (value === null || value === undefined) return "NULL";
  if (Array.isArray(value)) return value.join(", ");
  return String(value);
}

// The line under a table of rows: how many, and the snapshot they reflect (as `usl sql` prints).
function rowsLine(answer) {
  const parts = [`${answer.rowCount} row${answer.rowCount === 1 ? "" : "s"}` + (answer.truncated ? " (truncated)" : ""),
    `asOfSeq ${answer.asOfSeq}`];
  for (const [kind, generation] of Object.entries(answer.generations || {})) {
    parts.push(`${kind} gen ${generation && typeof generation === "object" ? generation.generationId : generation}`);
  }
  if (answer.uncovered) parts.push(`uncovered ${answer.uncovered.fromSeq}..${answer.uncovered.toSeq}`);
  if (answer.query) parts.push(`query: ${answer.query}`);
  if (answer.notice) parts.push(answer.notice);
  return parts.join(" · ");
}

const rowsNumber = { sql: 0, sessionql: 0 }; // as searchNumber, per tab

async function runRows(kind) {
  const mine = ++rowsNumber[kind];
  document.body.dataset[kind] = "running";
  const request = { query: $(`${kind}-query`).value, log: $("log").value || "default" };
  const asOf = $(`${kind}-asof`).value.trim();
  if (asOf !== "") request.asOfSeq = Number(asOf);
  $(`${kind}-error`).hidden = true;
  const response = await fetch(`/v1/${kind}`, {
    method: "POST", headers: { "Content-Type": "application/json", ...apiHeaders() }, body: JSON.stringify(request),
  });
  const answer = await answerOf(response);
  if (mine !== rowsNumber[kind]) return;
  if (answer.error) {
    $(`${kind}-error`).textContent = errorText(answer.error, response.status);
    $(`${kind}-error`).hidden = false;
    $(`${kind}-result`).replaceChildren();
    $(`${kind}-line`).hidden = true;
    document.body.dataset[kind] = "error";
    return;
  }
  $(`${kind}-result`).replaceChildren(table(answer.columns.map(String), answer.rows.map((row) => row.map(cellText))));
  const line = $(`${kind}-line`);
  line.textContent = rowsLine(answer);
  line.hidden = false;
  document.body.dataset[kind] = "done";
}

for (const kind of ["sql", "sessionql"]) {
  $(`${kind}-form`).addEventListener("submit", (event) => {
    event.preventDefault();
    rememberKey();
    toUrl(true);
    runRows(kind).catch((err) => {
      $(`${kind}-error`).textContent = `request failed: ${err}`;
      $(`${kind}-error`).hidden = false;
      document.body.dataset[kind] = "error";
    });
  });
}

function showTab(name) {
  for (const tab of document.querySelectorAll("#tabs .tab")) {
    tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
  }
  for (const panel of ["search", "sql", "sessionql"]) $(`${panel}-panel`).hidden = panel !== name;
  document.body.dataset.tab = name;
}

for (const tab of document.querySelectorAll("#tabs .tab")) {
  tab.addEventListener("click", () => { showTab(tab.dataset.tab); toUrl(); });
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
  const marks = points.map((p) => p.through).filter((v) => v !== null && v !== undefined);
  title.textContent = `lag over the last ${points.length} samples (max ${max} seqs)` +
    (marks.length ? `; watermark ${Math.min(...marks)} → ${Math.max(...marks)}` : "");
  svg.append(title);
  return svg;
}

// One line when records were rejected: how many, by stage, the newest one's time (null if none).
function deadLettersLine(letters, whose, command) {
  if (!letters || !letters.count) return null;
  const stages = Object.entries(letters.byStage || {}).map(([stage, n]) => `${stage} ${n}`).join(", ");
  return el("p", { class: "dead-letters", "data-count": letters.count },
    `${letters.count} dead letter${letters.count === 1 ? "" : "s"} ${whose} (${stages}` +
    `${letters.newest ? `, newest ${letters.newest}` : ""}): ${command}`);
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
      points.push({ t: now, lag: idx.lagSeqs || 0, through: idx.builtThroughSeq });
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
    const letters = deadLettersLine(entry.deadLetters, `of this log`, `usl deadletters --log ${logId}`);
    if (letters) block.append(letters);
    blocks.push(block);
  }
  // Letters that name no log, and logs whose every record was rejected (no events in L1).
  const reportLetters = report.deadLetters || {};
  const unnamed = deadLettersLine(reportLetters, "naming no log", "usl deadletters");
  if (unnamed) blocks.push(unnamed);
  for (const [logId, letters] of Object.entries(reportLetters.logsWithoutEvents || {})) {
    blocks.push(deadLettersLine(letters, `of log ${logId}, which has no events in L1`, `usl deadletters --log ${logId}`));
  }
  if (!blocks.length) blocks.push(el("p", { class: "muted" }, "No logs yet: ingest something with usl ingest PATH."));
  root.replaceChildren(...blocks);
  root.dataset.polls = String(Number(root.dataset.polls || 0) + 1);
  $("status-updated").textContent = new Date(now).toLocaleTimeString();
}

// The server keeps the last minutes of lag and watermarks (GET /v1/status/history), so a
// reloaded page starts with the history instead of an empty chart.
async function loadHistory() {
  try {
    const response = await fetch("/v1/status/history", { headers: authHeaders() });
    if (!response.ok) return;
    const body = await response.json();
    for (const sample of body.samples || []) {
      for (const [logId, entry] of Object.entries(sample.logs || {})) {
        for (const [kind, idx] of Object.entries(entry.indexes || {})) {
          const key = `${logId}/${kind}`;
          const points = lagHistory.get(key) || [];
          points.push({ t: sample.t * 1000, lag: idx.lagSeqs || 0, through: idx.builtThroughSeq });
          while (points.length > HISTORY_POINTS) points.shift();
          lagHistory.set(key, points);
        }
      }
    }
    $("status").dataset.serverSamples = String((body.samples || []).length);
  } catch (err) {
    $("status").dataset.serverSamples = "0";
  }
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

// A search that failed to get any answer (the network, a closed tab's server), unless a newer
// search has started since.
function failed(err, mine) {
  if (mine !== searchNumber) return;
  $("error").textContent = `request failed: ${err}`;
  $("error").hidden = false;
  document.body.dataset.search = "error";
}

function run() {
  const answered = search(null); // numbers the search before its first await
  const mine = searchNumber;
  answered.catch((err) => failed(err, mine));
}

// A search is a link: ?q=QUERY&freshness=latest&mode=text&k=5&log=default&explain=1&toolResults=1&as=PRINCIPAL
const URL_FIELDS = {
  q: "query", freshness: "freshness", mode: "mode", k: "k", log: "log", as: "principal",
  session: "f-session", tool: "f-tool", role: "f-role", status: "f-status", from: "f-from", to: "f-to",
  sql: "sql-query", sessionql: "sessionql-query",
};
const URL_CHECKS = { explain: "explain", toolResults: "toolResults" };

function fromUrl() {
  const params = new URLSearchParams(window.location.search);
  // A field the URL leaves out takes its default: Back from ?q=a&mode=text to ?q=b is a
  // hybrid search again, not one that keeps the later search's mode.
  for (const [param, id] of Object.entries(URL_FIELDS)) {
    const value = params.get(param);
    const field = $(id);
    if (value === null) {
      field.value = field.tagName === "SELECT"
        ? ([...field.options].find((o) => o.defaultSelected) || field.options[0]).value
        : field.defaultValue;
      continue;
    }
    if (field.tagName === "SELECT" && ![...field.options].some((o) => o.value === value)) {
      field.append(el("option", { value }, value)); // e.g. wait:12
    }
    field.value = value;
  }
  for (const [param, id] of Object.entries(URL_CHECKS)) {
    $(id).checked = params.has(param) ? !["0", "false", "no"].includes(params.get(param)) : $(id).defaultChecked;
  }
  const tab = ["sql", "sessionql"].includes(params.get("tab")) ? params.get("tab") : "search";
  showTab(tab);
  if (tab !== "search") {
    if (params.get(tab)) runRows(tab).catch(() => { document.body.dataset[tab] = "error"; });
    return false;
  }
  return Boolean(params.get("q"));
}

// A search (or query) the user runs is a new history entry, so Back returns to the one before
// and Forward comes back (popstate below runs it again); switching tabs only rewrites the
// current entry. The same search run twice adds nothing.
function toUrl(push) {
  const params = new URLSearchParams();
  for (const [param, id] of Object.entries(URL_FIELDS)) {
    const value = $(id).value.trim();
    if (value) params.set(param, value);
  }
  for (const [param, id] of Object.entries(URL_CHECKS)) if ($(id).checked) params.set(param, "1");
  if (document.body.dataset.tab && document.body.dataset.tab !== "search") params.set("tab", document.body.dataset.tab);
  const url = `${window.location.pathname}?${params}`;
  if (push && url !== `${window.location.pathname}${window.location.search}`) window.history.pushState(null, "", url);
  else window.history.replaceState(null, "", url);
}

// Back and Forward: the form as that entry's URL has it, and its search (or query) run again.
window.addEventListener("popstate", () => {
  $("more").hidden = true;
  $("error").hidden = true;
  if (fromUrl()) {
    run();
  } else {
    $("results").replaceChildren();
    $("freshness-line").hidden = true;
    $("meaning-only").hidden = true;
    $("explain-panel").hidden = true;
    document.body.dataset.search = "idle";
  }
});

function rememberKey() {
  const key = $("apikey").value.trim();
  if (key) sessionStorage.setItem(KEY_STORE, key);
  else sessionStorage.removeItem(KEY_STORE);
  // Where keys are enforced the history asked for at load was refused (no key yet): ask again
  // with the key, or the lag chart starts empty until the next reload.
  if (key && !Number($("status").dataset.serverSamples || 0)) loadHistory();
}

$("apikey").value = sessionStorage.getItem(KEY_STORE) || "";
$("apikey").addEventListener("change", rememberKey);

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  rememberKey();
  toUrl(true);
  run();
});
document.body.dataset.search = "idle";
if (fromUrl()) run();
loadHistory().finally(pollStatus);
