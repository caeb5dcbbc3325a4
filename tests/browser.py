"""Headless Chromium driven over the Chrome DevTools Protocol, for tests of the search page.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol messages on fd 3 and
writes them on fd 4, each a JSON object ending in a NUL byte. That needs no websocket client
and no open debugging port. Flags keep a headless browser off the (closed) network: no
QUIC, background networking, component updates or sync, and a fresh profile every time.
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser", "BrowserError", "find_chromium"]

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    """The browser died, answered with a protocol error, or a wait timed out."""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page; ``with Browser(path) as page: ...``."""

    def __init__(self, binary: str, *, width: int = 1400, height: int = 1000) -> None:
        self.binary = binary
        self.width, self.height = width, height
        self._ids = itertools.count(1)
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.console: list[str] = []
        self._session: str | None = None
        self._paused: queue.Queue[dict[str, Any]] = queue.Queue()

    # -- process and pipe -------------------------------------------------------------------

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="usl-chromium-")
        read_end, self._to_browser = os.pipe()
        self._from_browser, write_end = os.pipe()
        # The browser's ends go above fd 9 first, so neither can be fd 3 or 4 itself; bash then
        # moves them to fds 3 and 4, where --remote-debugging-pipe expects them.
        to_browser_r = fcntl.fcntl(read_end, fcntl.F_DUPFD, 10)
        from_browser_w = fcntl.fcntl(write_end, fcntl.F_DUPFD, 10)
        os.close(read_end)
        os.close(write_end)
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self._log = open(Path(self._profile) / "chromium.log", "wb")  # closed in __exit__
        self.process = subprocess.Popen(
            ["bash", "-c", script, self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._reader = threading.Thread(target=self._read_loop, name="cdp-reader", daemon=True)
        self._reader.start()
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.process.poll() is None:
                try:
                    self.call("Browser.close", timeout=5, session=False)
                except BrowserError:
                    pass
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, 9)
                    self.process.wait(timeout=10)
        finally:
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def _read_loop(self) -> None:
        buffer = b""
        while True:
            try:
                data = os.read(self._from_browser, 65536)
            except OSError:
                data = b""
            if not data:
                break
            buffer += data
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        waiter = self._replies.get(message["id"])
                    if waiter is not None:
                        waiter.put(message)
                elif message.get("method") == "Runtime.consoleAPICalled":
                    args = message["params"].get("args", [])
                    self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
                elif message.get("method") == "Fetch.requestPaused":
                    self._paused.put(message["params"])
                elif message.get("method") == "Runtime.exceptionThrown":
                    details = message["params"]["exceptionDetails"]
                    self.console.append("exception: " + str(details.get("exception", {}).get("description")
                                                            or details.get("text")))
        with self._lock:
            for waiter in self._replies.values():
                waiter.put({"error": {"message": "the browser closed its pipe"}})

    def call(self, method: str, *, timeout: float = 30.0, session: bool = True, **params: Any) -> dict[str, Any]:
        """Send one protocol command to the page (or the browser) and return its result."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if session and self._session is not None:
            message["sessionId"] = self._session
        waiter: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._replies[message_id] = waiter
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
            reply = waiter.get(timeout=timeout)
        except (OSError, queue.Empty) as exc:
            raise BrowserError(f"{method}: no answer from the browser ({exc!r})") from exc
        finally:
            with self._lock:
                self._replies.pop(message_id, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    # -- page -------------------------------------------------------------------------------

    def goto(self, url: str, *, timeout: float = 60.0) -> None:
        """Navigate and wait until the new document has loaded (its scripts have run)."""
        self.evaluate("window.__uslLeaving = true")  # gone once the new document replaced it
        answer = self.call("Page.navigate", url=url)
        if answer.get("errorText"):
            raise BrowserError(f"navigating to {url}: {answer['errorText']}")
        self.wait_for("!window.__uslLeaving && document.readyState === 'complete'",
                      timeout=timeout, what=f"{url} to load")

    def evaluate(self, expression: str, *, timeout: float = 30.0) -> Any:
        """The JSON value of a JavaScript expression in the page (promises are awaited)."""
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True, timeout=timeout)
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            raise BrowserError(f"{expression!r} threw: "
                               f"{details.get('exception', {}).get('description') or details.get('text')}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60.0, what: str | None = None) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        problem = None
        while True:
            try:
                value = self.evaluate(expression)
                problem = None
            except BrowserError as exc:  # e.g. no document yet while a navigation commits
                value, problem = None, exc
            if value:
                return value
            if self.process.poll() is not None:
                raise BrowserError(f"the browser exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout:.0f}s waiting for {what or expression}; "
                                   f"last error: {problem}; console: {self.console[-10:]}")
            time.sleep(0.25)

    # -- requests held or answered by the test ----------------------------------------------

    def intercept(self, url_pattern: str) -> None:
        """Hold every request whose URL matches ``url_pattern`` (``*`` wildcards) until the test
        lets it go (:meth:`release`) or answers it itself (:meth:`fulfil`)."""
        self.call("Fetch.enable", patterns=[{"urlPattern": url_pattern}])

    def held(self, *, timeout: float = 30.0) -> dict[str, Any]:
        """The next request held by :meth:`intercept` (``requestId``, ``request`` {url, ...})."""
        try:
            return self._paused.get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"no request was held within {timeout:.0f}s") from None

    def release(self, request: dict[str, Any]) -> None:
        """Let a held request go on to the server."""
        self.call("Fetch.continueRequest", requestId=request["requestId"])

    def fulfil(self, request: dict[str, Any], status: int, body: bytes, content_type: str) -> None:
        """Answer a held request without the server, as a proxy in front of it might."""
        self.call("Fetch.fulfillRequest", requestId=request["requestId"], responseCode=status,
                  responseHeaders=[{"name": "Content-Type", "value": content_type}],
                  body=base64.b64encode(body).decode())

    def screenshot(self, path: Path, *, selector: str | None = None, full_page: bool = False) -> Path:
        """Save a PNG of the viewport, the whole page, or one element's box."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page or selector is not None}
        if selector is not None:
            box = self.evaluate(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                " return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}; })()")
            params["clip"] = {**box, "scale": 1}
        elif full_page:
            size = self.evaluate("({width: document.documentElement.scrollWidth,"
                                 " height: document.documentElement.scrollHeight})")
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
