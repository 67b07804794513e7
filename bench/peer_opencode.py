"""opencode's own server (`opencode serve`) for the peer bench: its process, its REST calls
and its event stream, as opencode 1.18's OpenAPI document (GET /doc) describes them.

  POST /session                          a session in the server's directory
  POST /session/{id}/prompt_async        a prompt; the agent loop runs in the server
  GET  /event                            SSE of every event of the directory: message.part.delta
                                         (one per streamed text delta, with an `id`),
                                         message.part.updated, session.idle, ...
  GET  /session/{id}/message?limit=N     the last N messages (user and assistant), whole

Both opencode processes of the bench (this one, and `opencode acp` under corral) get the
same configuration: one provider, `fake`, speaking the Anthropic Messages API to the fake
model server, so no request leaves the machine.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import time
from pathlib import Path
from typing import Any

from bench import peer_procs
from bench.peer_api import HistoryPager, SideBase, WatcherState
from bench.peer_sse import Event, Stream, open_stream
from tests.agents import programs

PROVIDER, MODEL = "fake", "claude-sonnet-4-5"


def binary() -> Path:
    """The pinned opencode (agents/), or CORRAL_OPENCODE when set (a copy installed elsewhere)."""
    return Path(os.environ.get("CORRAL_OPENCODE") or programs.BIN / "opencode")


def config(model_url: str) -> str:
    provider = {
        "npm": "@ai-sdk/anthropic",  # bundled in the binary: nothing is installed at run time
        "name": "fake",
        "options": {"baseURL": f"{model_url}/v1", "apiKey": "sk-ant-fake"},
        "models": {MODEL: {"name": "fake", "limit": {"context": 200000, "output": 8192}}},
    }
    return json.dumps(
        {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "model": f"{PROVIDER}/{MODEL}",
            "small_model": f"{PROVIDER}/{MODEL}",
            "provider": {PROVIDER: provider},
        }
    )


def environment(home: Path, model_url: str) -> tuple[dict[str, str], str]:
    """opencode's environment (HOME of its own, offline) and its leftover tag."""
    env, tag = programs.base_env(home)
    env |= {
        "OPENCODE_CONFIG_CONTENT": config(model_url),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }
    return env, tag


class OpencodeServer:
    name = "opencode"

    def __init__(self, root: Path, model_url: str) -> None:
        self.cwd = root / "work"
        self.cwd.mkdir(parents=True, exist_ok=True)
        env, self.tag = environment(root / "home", model_url)
        self.port = peer_procs.free_port()
        argv = [str(binary()), "serve", "--hostname", "127.0.0.1", "--port", str(self.port)]
        self.server = peer_procs.Server(argv, env, self.cwd, root / "logs")

    @property
    def pid(self) -> int:
        return self.server.pid

    def start(self) -> None:
        self.server.start()
        self.server.wait_for_output("listening on", 120)

    def stop(self) -> None:
        self.server.stop()
        programs_sweep(self.tag)

    # -- REST (blocking: run them in a thread)

    def call(self, method: str, path: str, body: Any = None) -> tuple[Any, int]:
        """One request on a new connection: (the JSON answer, its body's size)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            return request(connection, method, path, body)
        finally:
            connection.close()

    def create_session(self) -> str:
        session, _ = self.call("POST", "/session", {"title": "peer bench"})
        return str(session["id"])

    def prompt(self, session: str, text: str) -> None:
        body = {"parts": [{"type": "text", "text": text}]}
        self.call("POST", f"/session/{session}/prompt_async", body)

    async def watch(self, last_event_id: str = "") -> Stream:
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        return await open_stream(self.port, "/event", headers)


def request(
    connection: http.client.HTTPConnection, method: str, path: str, body: Any = None
) -> tuple[Any, int]:
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, path, data, {"Content-Type": "application/json"})
    response = connection.getresponse()
    raw = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {raw[:300]!r}")
    return (json.loads(raw) if raw else None), len(raw)


def programs_sweep(tag: str) -> None:
    from tests.agents.child import sweep

    sweep(programs.LEFTOVER_TAG, tag)


class OpencodeView:
    """What one watcher of /event makes of the events of one session."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.chunks: list[str] = []  # every text delta's event id, in arrival order
        self.text = ""  # the deltas joined
        self.final_text = ""  # the last whole text part seen (message.part.updated)
        self.idle = False
        self.last_chunk_s = 0.0
        self.last_id = ""
        self._replies: set[str] = set()  # the assistant messages' ids

    def take(self, event: Event) -> None:
        payload = event.json()
        props = payload.get("properties", {})
        self.last_id = payload.get("id", "") or event.id or self.last_id
        if (
            props.get("sessionID") != self.session
            and props.get("part", {}).get("sessionID") != self.session
        ):
            return
        kind = payload.get("type")
        if kind == "message.updated" and props.get("info", {}).get("role") == "assistant":
            self._replies.add(props["info"].get("id", ""))
        elif kind == "message.part.delta" and props.get("field") == "text":
            self.chunks.append(payload.get("id", ""))
            self.last_chunk_s = time.monotonic()
            self.text += props.get("delta", "")
        elif kind == "message.part.updated" and props["part"].get("type") == "text":
            if props["part"].get("messageID") in self._replies:
                self.final_text = props["part"].get("text", "")
        elif kind == "session.idle":
            self.idle = True


class OpencodeWatcher(WatcherState[OpencodeView]):
    """One client of GET /event, following one session (bytes: of the event stream)."""

    def __init__(self, server: OpencodeServer, session: str) -> None:
        super().__init__(OpencodeView(session))
        self.server = server

    async def run(self, drop_after: int = 0, resume: bool = False) -> None:
        """Follows the stream until the session is idle, or until `drop_after` deltas came (then
        drops the connection). `resume` sends the last event id seen as Last-Event-ID."""
        stream = await self.server.watch(self.view.last_id if resume else "")
        start = 0
        try:
            while not self.view.idle:
                events = await stream.events()
                if not events:
                    raise RuntimeError("opencode ended the event stream")
                for event in events:
                    if not self.ready.is_set():
                        self.ready.set()  # the first event is server.connected
                        start = stream.bytes_in
                    self.view.take(event)
                if resume and not self.view.idle and not await self.busy():
                    break  # the turn ended while this watcher was away
                resume = False  # asked once, right after connecting
                if drop_after and len(self.view.chunks) >= drop_after:
                    return
            self.done_s = time.monotonic()
        finally:
            self.bytes_in += stream.bytes_in - start
            stream.close()

    async def busy(self) -> bool:
        """Whether the session is running a turn (GET /session/status lists busy ones)."""
        statuses, _ = await asyncio.to_thread(self.server.call, "GET", "/session/status")
        status = statuses.get(self.view.session, {}).get("type", "idle")
        return bool(status != "idle")


class OpencodeSide(SideBase[OpencodeServer]):
    """The peer as the bench drives it: sessions, prompts, watchers, history pages."""

    def __init__(self, root: Path, model_url: str) -> None:
        super().__init__("opencode", OpencodeServer(root, model_url))

    def agent_pids(self) -> list[int]:
        return []  # the agent loop runs inside the server

    async def new_session(self) -> str:
        return await asyncio.to_thread(self.server.create_session)

    async def prompt(self, session: str, text: str) -> None:
        await asyncio.to_thread(self.server.prompt, session, text)

    async def turn(self, session: str, text: str) -> None:
        """A whole turn: POST /session/{id}/message answers when the reply is complete."""
        body = {"parts": [{"type": "text", "text": text}]}
        await asyncio.to_thread(self.server.call, "POST", f"/session/{session}/message", body)

    def watcher(self, session: str) -> OpencodeWatcher:
        return OpencodeWatcher(self.server, session)

    def history(self, session: str) -> HistoryPager:
        return OpencodeHistory(self.server.port, session)


class OpencodeHistory:
    """History pages on one kept-alive connection (blocking)."""

    def __init__(self, port: int, session: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.session = session

    def turns(self) -> int:
        messages, _ = request(self.connection, "GET", f"/session/{self.session}/message")
        return sum(1 for m in messages if m["info"]["role"] == "user")

    def fetch(self, turns: int | None) -> int:
        """The last `turns` turns (a user message and its reply each), or all: the bytes."""
        query = "" if turns is None else f"?limit={2 * turns}"
        path = f"/session/{self.session}/message{query}"
        messages, size = request(self.connection, "GET", path)
        if turns is not None and len(messages) != 2 * turns:
            raise RuntimeError(f"asked for {2 * turns} messages, got {len(messages)}")
        return size

    def close(self) -> None:
        self.connection.close()
