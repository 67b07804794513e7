"""The fake model server: one asyncio HTTP server on 127.0.0.1:<free port>, in its own thread
with its own event loop, so sync tests, async tests and a daemon thread can all use it.

It routes each request to the API it belongs to, answers from the prompt's markers (script.py)
and records every exchange, in arrival order, for assertions. It binds loopback only and never
makes a request of its own.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_models import anthropic, gemini, openai, script
from tests.support.fake_models.http import Request, Response, serve_connection

GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):(\w+)$")


@dataclass(slots=True)
class Exchange:
    """One request and what the fake did with it."""

    method: str
    path: str
    target: str
    headers: dict[str, str]
    body: Any
    api: str = "unrouted"  # anthropic | openai | gemini | unrouted
    answer: str = ""  # text | tool | error NNN | count_tokens | models | not found
    status: int = 0
    prompt: str = ""
    tool_results: list[str] = field(default_factory=list)
    # False while the answer streams, and for good when the client cut it (a canceled turn).
    finished: bool = False
    started_s: float = 0.0
    ended_s: float = 0.0

    @property
    def is_model_call(self) -> bool:
        return self.answer in ("text", "tool") or self.answer.startswith("error")


class FakeModelServer:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="fake-models", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._changed = threading.Condition(self._lock)
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL without a path (Anthropic and Gemini clients add `/v1...` themselves)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeModelServer:
        self._thread.start()

        async def listen() -> int:
            self._server = await asyncio.start_server(
                lambda r, w: serve_connection(r, w, self._handle), host="127.0.0.1", port=0
            )
            return int(self._server.sockets[0].getsockname()[1])

        self.port = asyncio.run_coroutine_threadsafe(listen(), self.loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._server.wait_closed(), 2)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.loop.close()

    # -- what was asked

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def model_calls(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.is_model_call]

    def wait_for(
        self, predicate: Callable[[list[Exchange]], bool], timeout_s: float = 10
    ) -> list[Exchange]:
        """Blocks until `predicate(exchanges)` holds (re-checked on every change)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(list(self._exchanges)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fake models: condition not met; got {self._exchanges!r}")
                self._changed.wait(left)
            return list(self._exchanges)

    def _record(self, exchange: Exchange) -> None:
        with self._changed:
            self._exchanges.append(exchange)
            self._changed.notify_all()

    def _touch(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # -- routing

    async def _handle(self, request: Request, response: Response) -> None:
        try:
            body = request.json()
        except ValueError:
            body = request.body.decode(errors="replace")
        ex = Exchange(
            request.method,
            request.path,
            request.target,
            request.headers,
            body,
            started_s=time.monotonic(),
        )
        self._record(ex)
        try:
            await self._route(request, response, ex)
            ex.finished = True
        finally:
            ex.status = response.status
            ex.ended_s = time.monotonic()
            self._touch()

    async def _route(self, request: Request, response: Response, ex: Exchange) -> None:
        path, method = request.path, request.method
        if method == "POST" and path == "/v1/messages":
            ex.api = "anthropic"
            plan = self._plan(ex, anthropic.turn_of(ex.body))
            await anthropic.messages(request, response, plan)
        elif method == "POST" and path == "/v1/messages/count_tokens":
            ex.api, ex.answer = "anthropic", "count_tokens"
            await anthropic.count_tokens(request, response)
        elif method == "POST" and path == "/v1/responses":
            ex.api = "openai"
            plan = self._plan(ex, openai.turn_of(ex.body))
            await openai.responses(request, response, plan)
        elif method == "GET" and path.rstrip("/") == "/v1/models":
            ex.answer = "models"
            if "anthropic-version" in request.headers:
                ex.api = "anthropic"
                await anthropic.models(request, response)
            else:
                ex.api = "openai"
                await openai.models(request, response)
        elif method == "POST" and (m := GEMINI_PATH.match(path)):
            await self._gemini(request, response, ex, m.group(1), m.group(2))
        else:
            ex.answer = "not found"
            await response.json(
                404, {"error": {"message": f"fake models: no route for {method} {path}"}}
            )

    async def _gemini(
        self, request: Request, response: Response, ex: Exchange, model: str, verb: str
    ) -> None:
        ex.api = "gemini"
        if verb == "countTokens":
            ex.answer = "count_tokens"
            await gemini.count_tokens(request, response)
        elif verb in ("streamGenerateContent", "generateContent"):
            plan = self._plan(ex, gemini.turn_of(ex.body))
            await gemini.generate(request, response, plan, model, verb == "streamGenerateContent")
        else:
            ex.answer = "not found"
            await response.json(
                404, gemini.error_body(script.Error(404, f"fake models: no {verb}"))
            )

    def _plan(self, ex: Exchange, turn: tuple[str, list[str]]) -> script.Plan:
        ex.prompt, ex.tool_results = turn
        plan = script.plan(ex.prompt, len(ex.tool_results))
        ex.answer = plan.kind
        return plan


@contextmanager
def fake_model_server() -> Iterator[FakeModelServer]:
    server = FakeModelServer().start()
    try:
        yield server
    finally:
        server.stop()
