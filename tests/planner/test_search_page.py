"""The search page (``GET /``) in a real headless Chromium, against real processes.

A ``usl worker``, ``usl sink`` (every kind) and the planner API (``usl serve``) run on the
session's broker; the sample sessions go in through ``usl ingest``. The page is opened with
the query in its URL (``/?q=...&freshness=latest&explain=1``), which runs the search on load.
From the DOM the test checks that the results are the API's, that every evidence span is a
``<mark>`` carrying its event id, seq and byte offsets over exactly those bytes of the text,
that the explain panel shows the generations and ranking, and that the status view shows
every index's generation, watermark and lag, with a lag chart that rises while the sinks are
stopped and falls when they catch up. Screenshots go to ``screenshots/`` (gitignored).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings
from tests.browser import Browser, find_chromium
from tests.factories import interleave, session_events
from tests.harness import Stack, append_events, l1_seq, settings_env, wait_for_watermarks

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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ingest(settings: Settings, path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "planner", "ingest", str(path), "--json"],
                          env=settings_env(settings), capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr


def post_search(api: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"{api}/v1/search", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def wait_for_api(api: str, stack: Stack) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{api}/healthz", timeout=2) as response:
                if json.load(response).get("ready"):
                    return
        except OSError:
            pass
        proc = stack.procs["api"]
        assert proc.poll() is None, stack.log_text("api")[-4000:]
        assert time.monotonic() < deadline, "the planner API did not become ready"
        time.sleep(0.5)


@pytest.fixture
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; CI must install it (scripts/install-test-tools)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return binary


@pytest.fixture
def served(make_settings: Callable[..., Settings]) -> Iterator[tuple[Stack, str, int]]:
    """Worker, sinks and API on the sample sessions, every index caught up: (stack, API URL, seq)."""
    stack = Stack(make_settings())
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
        assert not [line for line in page.console if line.startswith("exception")], page.console
    for name in ("search-page.png", "status-chart.png"):
        assert (SCREENSHOTS / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
