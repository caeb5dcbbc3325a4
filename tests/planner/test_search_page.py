"""The search page (``GET /``) in a real headless Chromium, against real processes.

A ``usl worker``, ``usl sink`` (every kind) and the planner API (``usl serve``) run on the
session's broker; the sample sessions go in through ``usl ingest``. The page is opened with
the query in its URL (``/?q=...&freshness=latest&explain=1``), which runs the search on load.
From the DOM the test checks that the results are the API's, that every evidence span is a
``<mark>`` carrying its event id, seq and byte offsets over exactly those bytes of the text,
that the explain panel shows the generations and ranking, and that the status view shows
every index's generation, watermark and lag, with a lag chart that rises while the sinks are
stopped and falls when they catch up. A second test checks the page's work tools: query words
marked inside the evidence spans, a hit opened in its session's timeline (evidence marked, tool
calls folded), filters, the SQL and SessionQL tabs, and a lag history that survives a reload
because the server keeps it. Screenshots go to ``screenshots/`` (gitignored).
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.testing import Stack, free_port, ingest, stack_settings, wait_for_api
from sinks.testing import wait_for_watermarks
from streams.settings import Settings
from streams.testing import append_events, interleave, l1_seq, session_events
from tests.browser import Browser, find_chromium

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "sessions"
SCREENSHOTS = ROOT / "screenshots"
KINDS = ("text", "vector", "structured", "analytics", "toolresults")
QUERY = "refund rounding half even"
TIMEOUT = 180.0

# Everything the test reads from the page, in one evaluation.
READ_PAGE = """(() => {
  const rows = [...document.querySelectorAll('#status .index-row')];
  return {
    search: document.body.dataset.search,
    url: window.location.search,
    freshness: document.getElementById('freshness-line').hidden ? null
      : document.getElementById('freshness-line').textContent,
    error: document.getElementById('error').hidden ? null : document.getElementById('error').textContent,
    hits: [...document.querySelectorAll('#results li.hit')].map((li) => ({
      chunkId: li.dataset.chunkId,
      text: li.querySelector('pre').textContent,
      marks: [...li.querySelectorAll('mark.ev')].map((m) => ({
        eventId: m.dataset.eventId, seq: Number(m.dataset.seq), start: Number(m.dataset.start),
        end: Number(m.dataset.end), text: m.textContent,
        background: getComputedStyle(m).backgroundColor,
      })),
    })),
    explain: {
      visible: !document.getElementById('explain-panel').hidden
        && document.getElementById('explain-panel').open,
      text: document.getElementById('explain-body').innerText,
      tables: [...document.querySelectorAll('#explain-body table')].map((t) =>
        [...t.querySelectorAll('tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))),
    },
    polls: Number(document.getElementById('status').dataset.polls || 0),
    status: rows.map((r) => ({
      log: r.dataset.log, kind: r.dataset.kind, generation: r.dataset.generation,
      builtThrough: r.dataset.builtThrough === undefined ? null : Number(r.dataset.builtThrough),
      lagSeqs: Number(r.dataset.lagSeqs), figures: r.querySelector('.figures').textContent,
      points: Number(r.querySelector('svg.lag-chart').dataset.points),
      maxLag: Number(r.querySelector('svg.lag-chart').dataset.maxLag || 0),
      line: r.querySelector('svg.lag-chart path.line') !== null,
      chartWidth: r.querySelector('svg.lag-chart').getBoundingClientRect().width,
    })),
  };
})()"""


def post_search(api: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"{api}/v1/search", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


@pytest.fixture
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; CI must install it (scripts/install-test-tools)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return binary


def _serve(settings: Settings) -> Iterator[tuple[Stack, str, int]]:
    """Worker, sinks and API on the sample sessions, every index caught up: (stack, API URL, seq)."""
    stack = Stack(settings)
    try:
        port = free_port()
        stack.worker()
        stack.sinks()
        stack.start("api", "serve", "--port", str(port))
        for sample in sorted(EXAMPLES.iterdir()):
            ingest(stack.settings, sample)
        seq = l1_seq(stack.settings)
        wait_for_watermarks(stack.settings, seq, KINDS, timeout=TIMEOUT)
        api = f"http://127.0.0.1:{port}"
        wait_for_api(api, stack)
        yield stack, api, seq
    finally:
        stack.close()


@pytest.fixture
def served(make_settings: Callable[..., Settings]) -> Iterator[tuple[Stack, str, int]]:
    """A stack of this test's own, for a test that stops a process or appends events."""
    yield from _serve(make_settings())


@pytest.fixture(scope="module")
def served_once(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str, int]]:
    """One stack for the tests that only read from it (those that change it come first, with
    one each): a stack's start and catch-up was most of each test's time."""
    yield from _serve(stack_settings(tmp_path_factory.mktemp("served"), kafka_bootstrap))


def test_search_page_shows_results_evidence_explain_and_status(
    served: tuple[Stack, str, int], chromium: str,
) -> None:
    stack, api, seq = served
    request = {"query": QUERY, "freshness": "latest", "k": 5, "explain": True}
    expected = post_search(api, request)
    assert expected["results"], f"the API finds nothing for {QUERY!r}"

    params = urllib.parse.urlencode({"q": QUERY, "freshness": "latest", "k": 5, "explain": 1})
    with Browser(chromium) as page:
        page.goto(f"{api}/?{params}")
        page.wait_for("document.body.dataset.search === 'done' || document.body.dataset.search === 'error'",
                      what="the search to finish")
        page.wait_for("Number(document.getElementById('status').dataset.polls || 0) >= 2",
                      what="two status polls")
        seen = page.evaluate(READ_PAGE)
        assert seen["search"] == "done" and seen["error"] is None, (seen["error"], page.console)

        # The results are the API's, in its order, each with its evidence highlighted.
        assert [hit["chunkId"] for hit in seen["hits"]] == [r["chunkId"] for r in expected["results"]]
        assert f"asOfSeq {expected['asOfSeq']}" in seen["freshness"]
        for hit, result in zip(seen["hits"], expected["results"], strict=True):
            assert hit["text"] == result["text"]
            assert hit["marks"], f"no evidence highlighted in {hit['chunkId']}"
            raw = result["text"].encode()
            evidence = {(e["eventId"], e["seq"], e["start"], e["end"]) for e in result["evidence"]}
            for mark in hit["marks"]:
                assert (mark["eventId"], mark["seq"], mark["start"], mark["end"]) in evidence, mark
                # Byte offsets, not string indexes; an overlapping span is cut at its front only.
                assert raw[mark["start"]:mark["end"]].decode(errors="replace").endswith(mark["text"]), mark
                assert mark["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), mark

        # The explain panel: freshness reasons, the generations read, the ranking of the page.
        explain = seen["explain"]
        assert explain["visible"]
        assert "Generations read" in explain["text"] and "Ranking" in explain["text"]
        generations, *_, ranking = explain["tables"]
        assert {row[0] for row in generations} == set(expected["explain"]["generations"])
        assert [row[1] for row in ranking] == [r["chunkId"] for r in expected["results"]]

        # The status view: every index with its generation, watermark, zero lag and a chart.
        rows = {row["kind"]: row for row in seen["status"] if row["log"] == "default"}
        assert set(rows) == set(KINDS)
        for kind, row in rows.items():
            assert row["generation"] and row["builtThrough"] is not None and row["builtThrough"] >= seq, row
            assert row["lagSeqs"] == 0 and f"through {row['builtThrough']}" in row["figures"], row
            assert row["points"] >= 2 and row["line"] and row["chartWidth"] > 50, (kind, row)

        # Lag rises while the sinks are stopped and falls when they catch up.
        stack.kill("sinks", signal.SIGTERM)
        more = interleave(*[session_events(f"page-{n}", turns=2, seed=n) for n in range(3)])
        new_seq = append_events(stack.settings, more)
        page.wait_for(f"[...document.querySelectorAll('#status .index-row')].some((r) => "
                      f"Number(r.dataset.lagSeqs) >= {new_seq - seq})", what="the lag to show")
        polls = page.evaluate(READ_PAGE)["polls"]
        page.wait_for(f"Number(document.getElementById('status').dataset.polls) >= {polls + 2}",
                      what="two more polls while lagging")
        stack.sinks()
        wait_for_watermarks(stack.settings, new_seq, KINDS, timeout=TIMEOUT)
        page.wait_for(f"[...document.querySelectorAll('#status .index-row')].every((r) => "
                      f"Number(r.dataset.lagSeqs) === 0 && Number(r.dataset.builtThrough) >= {new_seq})",
                      timeout=TIMEOUT, what="every index to catch up on the page")
        polls = page.evaluate(READ_PAGE)["polls"]
        page.wait_for(f"Number(document.getElementById('status').dataset.polls) >= {polls + 2}",
                      what="two more polls caught up")
        after = page.evaluate(READ_PAGE)
        for row in after["status"]:
            assert row["maxLag"] >= new_seq - seq and row["lagSeqs"] == 0, row

        # Searching again from the form (what a user does) updates the results and the URL.
        page.evaluate("document.getElementById('freshness').value = 'indexed';"
                      "document.getElementById('search-form').requestSubmit(); true")
        page.wait_for("document.body.dataset.search === 'done' && "
                      f"document.getElementById('freshness-line').textContent.includes('asOfSeq {new_seq}')",
                      what="the second search")
        final = page.evaluate(READ_PAGE)
        assert "freshness=indexed" in final["url"] and "q=refund" in final["url"]
        assert final["hits"] and all(hit["marks"] for hit in final["hits"])

        page.evaluate("window.scrollTo(0, 0); true")
        page.screenshot(SCREENSHOTS / "search-page.png", full_page=True)
        page.screenshot(SCREENSHOTS / "status-chart.png", selector="#status-panel")

        # A rejected record of the log shows under its indexes (after the screenshots: they show
        # a clean log).
        from streams.l1 import DeadLetters

        letters = DeadLetters(stack.settings.bootstrap_servers or "", stack.settings)
        letters.publish(stage="ingest", reason="not JSON", raw="{cut", log_id="default")
        letters.close()
        page.wait_for("[...document.querySelectorAll('#status .dead-letters')].some((p) => "
                      "p.dataset.count === '1' && p.textContent.includes('usl deadletters --log default'))",
                      timeout=TIMEOUT, what="the dead letter to show")
        assert not [line for line in page.console if line.startswith("exception")], page.console
    for name in ("search-page.png", "status-chart.png"):
        assert (SCREENSHOTS / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# What the page's query-word highlighting must find: the text index's words, lowercased.
_WORD = re.compile(r"[^\W_]+")

READ_WORK = """(() => ({
  search: document.body.dataset.search,
  url: window.location.search,
  hits: [...document.querySelectorAll('#results li.hit')].map((li) => ({
    chunkId: li.dataset.chunkId, sessionId: li.dataset.sessionId,
    spans: [...li.querySelectorAll('mark.ev')].map((m) => ({
      text: m.textContent, terms: [...m.querySelectorAll('mark.term')].map((t) => t.textContent),
    })),
    outside: [...li.querySelectorAll('mark.term')].filter((t) => !t.closest('mark.ev')).length,
    background: li.querySelector('mark.term') && getComputedStyle(li.querySelector('mark.term')).backgroundColor,
  })),
}))()"""


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


WIDTHS = (390, 1400)
# How far the page is wider than its window, and the elements sticking out past its right edge.
OVERFLOW = """(() => {
  const width = document.documentElement.clientWidth;
  return {
    extra: document.documentElement.scrollWidth - width,
    out: [...document.querySelectorAll('body *')]
      .filter((e) => e.getClientRects().length && e.getBoundingClientRect().right > width + 1)
      .slice(0, 5).map((e) => `${e.tagName}#${e.id}.${e.className}`),
  };
})()"""


def test_search_page_fits_a_phone_and_a_desktop_with_long_lines(
    served: tuple[Stack, str, int], chromium: str,
) -> None:
    """A hit whose text is one 4 kB line without a space (a base64 blob, a minified file), its
    explain panel and its session (tool calls unfolded) fit the window: on a 390 px phone a
    ``1fr`` grid track took the width of the longest such line and the whole page scrolled
    sideways, the search button and the hits' right edges cut off."""
    stack, api, _seq = served
    blob = "".join(f"{n:x}" for n in range(1, 1800))[:4000]
    events = session_events("s-long-lines", turns=1, seed=7)
    message = next(e for e in events if e["type"] == "message" and e["role"] == "user")
    message["fields"]["text"] = f"zebraquux blob {blob}"
    result = next(e for e in events if e["type"] == "tool.result")
    result["fields"]["output"] = f"{blob}\nzebraquux done"
    last = append_events(stack.settings, events)
    wait_for_watermarks(stack.settings, last, KINDS, timeout=TIMEOUT)
    for width in WIDTHS:
        with Browser(chromium, width=width, height=844) as page:
            page.goto(f"{api}/?{urllib.parse.urlencode({'q': 'zebraquux', 'explain': 1})}")
            page.wait_for("document.body.dataset.search === 'done'", what="the search")
            assert page.evaluate("document.querySelectorAll('#results li.hit').length") >= 1
            assert page.evaluate(OVERFLOW) == {"extra": 0, "out": []}, width
            # Figures in the explain tables stay whole (an exact rrf 8579/139360 was broken in
            # two); ids beside them wrap instead.
            broken = page.evaluate("""[...document.querySelectorAll('#explain-body td.figure')].filter((td) => {
              const range = document.createRange(); range.selectNodeContents(td);
              return range.getClientRects().length > 1; }).map((td) => td.textContent)""")
            assert broken == [] and page.evaluate("document.querySelectorAll('#explain-body td.figure').length")
            page.evaluate("document.querySelector('#results li.hit .open-session').click(); true")
            page.wait_for("document.body.dataset.session === 'done'", what="the session view")
            page.evaluate("for (const d of document.querySelectorAll('details')) d.open = true; true")
            assert page.evaluate(OVERFLOW) == {"extra": 0, "out": []}, width
            page.screenshot(SCREENSHOTS / f"long-lines-{width}.png", full_page=True)
            assert not [line for line in page.console if line.startswith("exception")], page.console


def test_search_page_freshness_line_counts_the_events_an_indexed_search_left_out(
    served: tuple[Stack, str, int], chromium: str,
) -> None:
    """While the indexes lag, an indexed search reads them at their asOfSeq: its freshness line
    said "nothing uncovered" beside "L1 N", the events after asOfSeq uncounted. It now says how
    many newer events were not searched and how to include them; a latest search has none."""
    stack, api, seq = served
    stack.kill("sinks", signal.SIGTERM)
    more = interleave(*[session_events(f"lag-{n}", turns=2, seed=n) for n in range(2)])
    new_seq = append_events(stack.settings, more)
    with Browser(chromium) as page:
        for freshness in ("indexed", "latest"):
            page.goto(f"{api}/?{urllib.parse.urlencode({'q': QUERY, 'freshness': freshness})}")
            page.wait_for("document.body.dataset.search === 'done'", what=f"the {freshness} search")
            line = page.evaluate("document.getElementById('freshness-line').textContent")
            truth = post_search(api, {"query": QUERY, "freshness": freshness})
            newer = truth["freshness"]["l1CommittedSeq"] - truth["asOfSeq"]
            if freshness == "indexed":
                assert truth["asOfSeq"] <= seq < new_seq and newer >= new_seq - seq, truth["freshness"]
                assert f"{newer} newer events in L1 not searched (freshness latest searches them)" in line, line
            else:
                assert newer == 0 and "not searched" not in line, line


def test_search_page_terms_session_view_filters_queries_and_history(
    served_once: tuple[Stack, str, int], chromium: str,
) -> None:
    _stack, api, _seq = served_once
    with Browser(chromium) as page:
        # Query words are marked inside the evidence spans, each where the word occurs.
        page.goto(f"{api}/?{urllib.parse.urlencode({'q': QUERY, 'k': 5})}")
        page.wait_for("document.body.dataset.search === 'done'", what="the search")
        seen = page.evaluate(READ_WORK)
        words = set(_WORD.findall(QUERY.lower()))
        marked = 0
        for hit in seen["hits"]:
            assert hit["outside"] == 0, hit
            for span in hit["spans"]:
                expected = [w for w in _WORD.findall(span["text"]) if w.lower() in words]
                assert [t.lower() for t in span["terms"]] == [w.lower() for w in expected], span
                marked += len(span["terms"])
        assert marked, "no query word marked in any evidence span"
        assert next(h["background"] for h in seen["hits"] if h["background"]) not in ("rgba(0, 0, 0, 0)", None)
        page.screenshot(SCREENSHOTS / "search-terms.png", selector="#results")

        # Open the first hit in its session: the timeline around it, its evidence marked,
        # tool calls and results folded, exactly the session's events as the export has them.
        answer = post_search(api, {"query": QUERY, "k": 5})
        first = answer["results"][0]
        page.evaluate("document.querySelector('#results li.hit .open-session').click(); true")
        page.wait_for("document.body.dataset.session === 'done' || document.body.dataset.session === 'error'",
                      what="the session view")
        view = page.evaluate("""(() => ({
          error: document.getElementById('session-error').hidden ? null : document.getElementById('session-error').textContent,
          session: document.getElementById('session-view').dataset.sessionId,
          line: document.getElementById('session-line').textContent,
          events: [...document.querySelectorAll('#timeline li.event')].map((li) => ({
            id: li.dataset.eventId, type: li.dataset.type, evidence: li.classList.contains('evidence'),
            folded: li.querySelector('details') ? !li.querySelector('details').open : null,
            text: li.textContent.trim(),
          })),
        }))()""")
        assert view["error"] is None and view["session"] == first["sessionId"], view
        params = urllib.parse.urlencode({"what": "sessions", "sessionId": first["sessionId"],
                                         "asOfSeq": answer["asOfSeq"]})
        with urllib.request.urlopen(f"{api}/v1/export?{params}", timeout=60) as response:
            exported = [json.loads(line)["eventId"] for line in response.read().decode().splitlines()]
        shown = [event["id"] for event in view["events"]]
        start = exported.index(shown[0])
        assert shown == exported[start:start + len(shown)], "the timeline is not a slice of the session"
        evidence = {e["eventId"] for e in first["evidence"]}
        assert {e["id"] for e in view["events"] if e["evidence"]} == evidence & set(shown)
        assert evidence & set(shown), "no evidence event of the hit in its timeline"
        tools = [e for e in view["events"] if e["type"] in ("tool.call", "tool.result")]
        assert all(e["folded"] for e in tools) and all(e["folded"] is None for e in view["events"]
                                                         if e not in tools)
        assert f"asOfSeq {answer['asOfSeq']}" in view["line"]
        assert not [e for e in view["events"] if e["text"].endswith("null")], "a missing text shown as null"
        page.screenshot(SCREENSHOTS / "session-view.png", selector="#session-view")

        # Filters narrow the search exactly as the API's filters do, and live in the URL.
        page.evaluate(f"document.getElementById('f-session').value = {json.dumps(first['sessionId'])};"
                      "document.getElementById('f-role').value = 'assistant';"
                      "document.getElementById('search-form').requestSubmit(); true")
        page.wait_for("document.body.dataset.search === 'done' && window.location.search.includes('session=')",
                      what="the filtered search")
        filtered = page.evaluate(READ_WORK)
        expected = post_search(api, {"query": QUERY, "k": 5,
                                     "filters": {"sessionId": first["sessionId"], "role": "assistant"}})
        assert [h["chunkId"] for h in filtered["hits"]] == [r["chunkId"] for r in expected["results"]]
        assert all(h["sessionId"] == first["sessionId"] for h in filtered["hits"])
        assert "role=assistant" in filtered["url"]

        # SQL and SessionQL tabs: the API's rows and the asOfSeq they reflect.
        for tab, route, text in (("sql", "/v1/sql", "SELECT sessionId, count(*) AS n FROM events GROUP BY 1 ORDER BY 1"),
                                 ("sessionql", "/v1/sessionql", "FROM events GROUP BY sessionId")):
            page.goto(f"{api}/?{urllib.parse.urlencode({'tab': tab, tab: text})}")
            page.wait_for(f"document.body.dataset.{tab} === 'done' || document.body.dataset.{tab} === 'error'",
                          what=f"the {tab} query")
            rows = page.evaluate(f"""(() => ({{
              error: document.getElementById('{tab}-error').hidden ? null : document.getElementById('{tab}-error').textContent,
              line: document.getElementById('{tab}-line').textContent,
              visible: !document.getElementById('{tab}-panel').hidden && document.getElementById('search-panel').hidden,
              head: [...document.querySelectorAll('#{tab}-result th')].map((th) => th.textContent),
              rows: [...document.querySelectorAll('#{tab}-result tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent)),
            }}))()""")
            truth = post_json(f"{api}{route}", {"query": text})
            assert rows["error"] is None and rows["visible"], rows
            assert rows["head"] == [str(c) for c in truth["columns"]]
            assert rows["rows"] == [["NULL" if v is None else str(v) for v in row] for row in truth["rows"]]
            assert f"asOfSeq {truth['asOfSeq']}" in rows["line"]
            page.screenshot(SCREENSHOTS / f"{tab}-tab.png", full_page=True)

        # The lag history is the server's: a reload starts with it, not with an empty chart.
        page.goto(f"{api}/")
        page.wait_for("Number(document.getElementById('status').dataset.polls || 0) >= 3", what="three polls")
        before = page.evaluate("Math.min(...[...document.querySelectorAll('#status svg.lag-chart')]"
                               ".map((s) => Number(s.dataset.points)))")
        page.goto(f"{api}/")
        page.wait_for("Number(document.getElementById('status').dataset.polls || 0) >= 1", what="the first poll")
        after = page.evaluate("""(() => ({
          samples: Number(document.getElementById('status').dataset.serverSamples),
          points: Math.min(...[...document.querySelectorAll('#status svg.lag-chart')].map((s) => Number(s.dataset.points))),
        }))()""")
        assert after["samples"] >= 2 and after["points"] >= min(before, after["samples"]) + 1, (before, after)
        history = get_json(f"{api}/v1/status/history?log=default")
        kinds = set(history["samples"][-1]["logs"]["default"]["indexes"])
        assert kinds == set(KINDS) and history["everySeconds"] > 0
        times = [s["t"] for s in history["samples"]]
        assert times == sorted(times)
        page.screenshot(SCREENSHOTS / "status-history.png", selector="#status-panel")
        assert not [line for line in page.console if line.startswith("exception")], page.console


# The widths the page must fit without scrolling sideways: a phone, and a desktop window.
def test_search_page_back_and_forward_between_searches(
    served_once: tuple[Stack, str, int], chromium: str,
) -> None:
    """Each search is a history entry: Back shows the search before it (query, mode and its
    results, run again), Forward the later one; running the same search again adds no entry.
    With the URL only rewritten in place, Back left the page for wherever the user came from."""
    _stack, api, _seq = served_once
    state = """(() => ({
      query: document.getElementById('query').value, mode: document.getElementById('mode').value,
      url: window.location.search, entries: window.history.length,
      hits: [...document.querySelectorAll('#results li.hit')].map((li) => li.dataset.chunkId),
    }))()"""

    def submit(page: Browser, query: str, mode: str) -> dict[str, Any]:
        page.evaluate(f"document.getElementById('query').value = {json.dumps(query)};"
                      f"document.getElementById('mode').value = {json.dumps(mode)};"
                      "document.body.dataset.search = 'submitted';"
                      "document.getElementById('search-form').requestSubmit(); true")
        page.wait_for("document.body.dataset.search === 'done'", what=f"the search for {query}")
        seen: dict[str, Any] = page.evaluate(state)
        return seen

    def go(page: Browser, step: str) -> dict[str, Any]:
        page.evaluate(f"document.body.dataset.search = 'moved'; history.{step}(); true")
        page.wait_for("document.body.dataset.search === 'done'", what=f"history.{step}()")
        seen: dict[str, Any] = page.evaluate(state)
        return seen

    with Browser(chromium) as page:
        page.goto(f"{api}/")
        first = submit(page, QUERY, "hybrid")
        second = submit(page, "pytest failure", "text")
        assert second["entries"] == first["entries"] + 1 and "mode=text" in second["url"]
        assert submit(page, "pytest failure", "text")["entries"] == second["entries"]
        back = go(page, "back")
        assert (back["query"], back["mode"], back["hits"]) == (QUERY, "hybrid", first["hits"]), back
        forward = go(page, "forward")
        assert (forward["query"], forward["mode"], forward["hits"]) == ("pytest failure", "text", second["hits"])
        assert not [line for line in page.console if line.startswith("exception")], page.console


def test_search_page_shows_the_latest_search_and_says_what_a_non_json_answer_was(
    served_once: tuple[Stack, str, int], chromium: str,
) -> None:
    """Two searches in flight (the first held back, as a slow wait:30 one is, the second typed
    while it waits): the page shows the second's results whichever answer arrives last; the
    first's used to replace them when it came back later, under the second's query. An answer
    that is not the API's JSON (a proxy's HTML 502) is shown as its status and type, not
    "SyntaxError: Unexpected token", and a failed search leaves no earlier search's results
    on the page."""
    _stack, api, _seq = served_once
    state = """(() => ({
      search: document.body.dataset.search, url: window.location.search,
      hits: [...document.querySelectorAll('#results li.hit')].map((li) => li.dataset.chunkId),
      freshness: !document.getElementById('freshness-line').hidden,
      error: document.getElementById('error').hidden ? null : document.getElementById('error').textContent,
      answered: performance.getEntriesByType('resource').filter((r) => r.name.endsWith('/v1/search')
        && r.responseEnd > 0).length,
    }))()"""

    def submit(page: Browser, query: str) -> None:
        page.evaluate(f"document.getElementById('query').value = {json.dumps(query)};"
                      "document.getElementById('search-form').requestSubmit(); true")

    with Browser(chromium) as page:
        page.goto(f"{api}/")
        page.intercept("*/v1/search")
        submit(page, QUERY)
        first = page.held()
        submit(page, "pytest failure")
        second = page.held()
        page.release(second)
        page.wait_for("document.body.dataset.search === 'done'", what="the second search")
        page.release(first)
        page.wait_for(f"({state}).answered >= 2", what="the first search's late answer")
        seen = page.evaluate(state)
        truth = post_search(api, {"query": "pytest failure"})
        assert seen["hits"] == [hit["chunkId"] for hit in truth["results"]], seen
        assert "pytest+failure" in seen["url"] and seen["search"] == "done"

        submit(page, QUERY)
        page.fulfil(page.held(), 502, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        page.wait_for("document.body.dataset.search === 'error'", what="the 502")
        failed = page.evaluate(state)
        assert "502" in failed["error"] and "text/html" in failed["error"], failed
        assert "SyntaxError" not in failed["error"] and "Unexpected token" not in failed["error"]
        assert failed["hits"] == [] and not failed["freshness"], failed
        assert not [line for line in page.console if line.startswith("exception")], page.console


def test_search_page_opens_a_hit_s_session_in_the_log_it_was_found_in(
    served_once: tuple[Stack, str, int], chromium: str,
) -> None:
    """"open session" reads the hit's session from the log the search read, at its asOfSeq,
    whatever the Log field says by then: after the field was changed without searching again,
    it asked the other log for the session (404 no log named ..., or another log's session of
    that id at a position of this one)."""
    _stack, api, _seq = served_once
    with Browser(chromium) as page:
        page.goto(f"{api}/?{urllib.parse.urlencode({'q': QUERY, 'log': 'default'})}")
        page.wait_for("document.body.dataset.search === 'done'", what="the search")
        page.evaluate("document.getElementById('log').value = 'elsewhere';"
                      "document.querySelector('#results li.hit .open-session').click(); true")
        page.wait_for("['done', 'error'].includes(document.body.dataset.session)", what="the session view")
        view = page.evaluate("""(() => ({
          state: document.body.dataset.session,
          error: document.getElementById('session-error').hidden ? null : document.getElementById('session-error').textContent,
          session: document.getElementById('session-view').dataset.sessionId,
          hit: document.querySelector('#results li.hit').dataset.sessionId,
          evidence: document.querySelectorAll('#timeline li.evidence').length,
        }))()""")
        assert view["state"] == "done" and view["error"] is None, view
        assert view["session"] == view["hit"] and view["evidence"] >= 1, view


def test_search_page_says_when_no_result_contains_the_query_s_words(
    served_once: tuple[Stack, str, int], chromium: str,
) -> None:
    """In hybrid mode the vector index always has nearest neighbours, so a query whose words
    occur nowhere filled the page with ten results that looked like matches. When every result
    came from the vector source alone, the page now says so; otherwise, in text mode (which
    answers "No results.") and in vector mode (where that is what was asked), it does not."""
    _stack, api, _seq = served_once
    nonsense = "zzqxqv flibbertigibbet"
    with Browser(chromium) as page:
        for query, mode, notice in ((nonsense, "hybrid", True), (QUERY, "hybrid", False),
                                    (nonsense, "text", False), (nonsense, "vector", False)):
            page.goto(f"{api}/?{urllib.parse.urlencode({'q': query, 'mode': mode})}")
            page.wait_for("document.body.dataset.search === 'done'", what=f"{query} ({mode})")
            seen = page.evaluate("""(() => ({
              notice: !document.getElementById('meaning-only').hidden,
              hits: document.querySelectorAll('#results li.hit').length,
              empty: document.getElementById('results').textContent.includes('No results.'),
            }))()""")
            truth = post_search(api, {"query": query, "mode": mode})
            assert seen["hits"] == len(truth["results"]), (query, mode, seen)
            only_vector = bool(truth["results"]) and all(set(hit["score"]["components"]) == {"vector"}
                                                         for hit in truth["results"])
            assert only_vector == (mode != "text" and query == nonsense), (query, mode, truth["results"][:1])
            assert seen["notice"] == notice, (query, mode, seen)
            assert seen["empty"] == (mode == "text" and query == nonsense), (query, mode, seen)


def test_search_page_says_why_the_results_end_at_the_rank_depth(
    served_once: tuple[Stack, str, int], chromium: str,
) -> None:
    """An answer whose results stop at the rank depth while a source had more matches carries
    ``end`` (its message says how to reach them); the page showed nothing, the next-page
    button simply gone. Over the real tau-bench transcripts a text search for "refund" ends
    after 67 results that way. The sample corpus is too small to reach the depth, so the API's
    own answer is given an ``end`` on its way to the page."""
    _stack, api, _seq = served_once
    answer = post_search(api, {"query": QUERY, "k": 10})
    end = {"reason": "rankDepth", "depth": 200, "sources": ["text"],
           "message": "results end at rank depth 200: text had more matches; refine the query or add "
                      "filters to reach them"}
    with Browser(chromium) as page:
        page.goto(f"{api}/")
        page.intercept("*/v1/search")
        page.evaluate(f"document.getElementById('query').value = {json.dumps(QUERY)};"
                      "document.getElementById('search-form').requestSubmit(); true")
        page.fulfil(page.held(), 200, json.dumps({**answer, "cursor": None, "end": end}).encode(),
                    "application/json")
        page.wait_for("document.body.dataset.search === 'done'", what="the search")
        seen = page.evaluate("""(() => ({
          hits: document.querySelectorAll('#results li.hit').length,
          end: [...document.querySelectorAll('#results li.results-end')].map((li) => li.textContent),
          more: !document.getElementById('more').hidden,
        }))()""")
        assert seen == {"hits": len(answer["results"]), "end": [end["message"]], "more": False}, seen
