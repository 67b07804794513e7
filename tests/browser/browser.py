"""Python's side of tests/browser/driver.mjs: a headless chromium driven by Playwright, one
request at a time over the driver's stdin/stdout."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.mjs")
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / ".bench" / "screenshots"
PHONE = (390, 844)
DESKTOP = (1280, 800)
TIMEOUT_MS = 15_000


# The page's requests so far (name, start, end in ms; end 0 while in flight).
_CALLS_JS = """() => performance.getEntriesByType("resource").map(
  (e) => [e.name.split("/").pop(), Math.round(e.startTime), Math.round(e.responseEnd)])"""


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self) -> None:
        node = shutil.which("node")
        if node is None or not CHROMIUM.exists():
            raise RuntimeError(
                "the browser tests need node and /usr/bin/chromium: buildscripts/test installs both"
            )
        if not (ROOT / "clients/dashboard/node_modules/playwright-core").exists():
            raise RuntimeError("playwright-core is missing: npm ci --prefix clients/dashboard")
        self._proc = subprocess.Popen(
            [node, str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._next = 1
        ready = self._read()
        assert ready.get("value") == "ready", ready

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise BrowserError(f"the browser driver ended: {err[-2000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, op: str, **args: Any) -> Any:
        assert self._proc.stdin is not None
        request = {"id": self._next, "op": op, **args}
        self._next += 1
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        answer = self._read()
        if not answer["ok"]:
            raise BrowserError(f"{op} {args}: {answer['error']}")
        return answer["value"]

    def page(self, size: tuple[int, int] = DESKTOP, dark: bool = False) -> Page:
        scheme = "dark" if dark else "light"
        return Page(self, self.call("newPage", width=size[0], height=size[1], colorScheme=scheme))

    def close(self) -> None:
        with contextlib.suppress(BrowserError):
            self.call("quit")
        try:
            self._proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()


class Page:
    def __init__(self, browser: Browser, page_id: int) -> None:
        self.browser = browser
        self.id = page_id

    def _call(self, op: str, **args: Any) -> Any:
        try:
            return self.browser.call(op, page=self.id, **args)
        except BrowserError as exc:
            # What the page showed and asked when it failed, for whoever reads the failure.
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / f"failed-page{self.id}.png"
            calls: Any = None
            with contextlib.suppress(BrowserError):
                self.browser.call("screenshot", page=self.id, path=str(shot))
                calls = self.browser.call("evaluate", page=self.id, js=_CALLS_JS, arg=None)
            raise BrowserError(f"{exc}\nscreenshot: {shot}\nthe page's calls: {calls}") from None

    def goto(self, url: str) -> None:
        self._call("goto", url=url)

    def click(self, selector: str) -> None:
        self._call("click", selector=selector, timeout=TIMEOUT_MS)

    def fill(self, selector: str, text: str) -> None:
        self._call("fill", selector=selector, text=text, timeout=TIMEOUT_MS)

    def press(self, selector: str, key: str) -> None:
        self._call("press", selector=selector, key=key, timeout=TIMEOUT_MS)

    def select(self, selector: str, value: str) -> None:
        self._call("select", selector=selector, value=value, timeout=TIMEOUT_MS)

    def wait_for(self, selector: str, state: str = "visible", timeout_ms: int = TIMEOUT_MS) -> None:
        self._call("waitFor", selector=selector, state=state, timeout=timeout_ms)

    def wait_until(
        self, js: str, arg: Any = None, timeout_ms: int = TIMEOUT_MS, every_frame: bool = False
    ) -> Any:
        """Polls the page (every 50 ms, or every animation frame) until `js` (a function of
        `arg`) returns something truthy; returns it."""
        polling = "raf" if every_frame else 50
        return self._call("waitForFunction", js=js, arg=arg, timeout=timeout_ms, polling=polling)

    def evaluate(self, js: str, arg: Any = None) -> Any:
        return self._call("evaluate", js=js, arg=arg)

    def texts(self, selector: str) -> list[str]:
        texts: list[str] = self._call("text", selector=selector)
        return texts

    def count(self, selector: str) -> int:
        n: int = self._call("count", selector=selector)
        return n

    def errors(self) -> list[str]:
        errors: list[str] = self._call("pageErrors")
        return errors

    def screenshots(self, name: str) -> None:
        """The page at phone and at desktop width, into .bench/screenshots/NAME-*.png; at
        both, nothing may be wider than the screen (no sideways scrolling)."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for label, (width, height) in (("phone", PHONE), ("desktop", DESKTOP)):
            self._call("viewport", width=width, height=height)
            self._call("screenshot", path=str(SCREENSHOTS / f"{name}-{label}.png"))
            wide = self.evaluate("() => document.documentElement.scrollWidth")
            assert wide <= width, f"{name} at {label} width is {wide} px wide"

    def close(self) -> None:
        self._call("closePage")
