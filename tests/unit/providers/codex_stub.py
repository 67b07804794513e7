"""A tiny `codex app-server` for the edge cases the real one does not produce on demand. Run as
`python codex_stub.py MODE app-server` (the provider appends `app-server`); it answers
initialize and thread/start or thread/resume (thread "th1"), then per MODE on turn/start:

- `echo`: streams the prompt text back as two deltas of item "m1" (the first one before its
  answer to turn/start, as codex could), then completes the turn;
- `crash`: exits with status 3 mid-turn;
- `huge`: writes one line over the provider's line limit;
- `garbage`: writes a line that is not JSON;
- `ask`: asks for a command approval whose JSON-RPC id is the id of the client's own
  turn/start (before answering it), then replies with the decision it got;
- `resolve`: takes a steer, then asks for a file-change approval and settles it itself at
  once (serverRequest/resolved);
- `refuse`: answers turn/start with a JSON-RPC error;
- `mute`: never answers turn/start;
- `slow`: streams one delta and never completes the turn; an interrupt ends it interrupted;
- `hang`: as slow, but never answers turn/interrupt, ignores SIGTERM and does not exit when
  stdin closes;
- `unknown`: sends a server request corral does not know, then replies with the error it got.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

MODE = sys.argv[1]
THREAD = "th1"
TURN = "tu1"


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read() -> dict[str, Any]:
    """The next message from the client (notifications such as `initialized` skipped)."""
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        message: dict[str, Any] = json.loads(line)
        if "id" in message:
            return message


def delta(text: str) -> None:
    params = {"threadId": THREAD, "turnId": TURN, "itemId": "m1", "delta": text}
    send({"method": "item/agentMessage/delta", "params": params})


def complete(status: str = "completed") -> None:
    turn: dict[str, Any] = {"id": TURN, "items": [], "status": status, "error": None}
    send({"method": "turn/completed", "params": {"threadId": THREAD, "turn": turn}})


def answer(rid: Any, result: Any) -> None:
    send({"id": rid, "result": result})


def turn(rid: Any, text: str) -> None:
    started = {"turn": {"id": TURN, "items": [], "status": "inProgress"}}
    if MODE == "refuse":
        send({"id": rid, "error": {"code": -32600, "message": "no turns today"}})
        return
    if MODE == "mute":
        return
    if MODE == "ask":
        # Codex's request shares the id of the client's pending turn/start: only "method"
        # tells them apart.
        decisions = ["accept", {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["ls"]}}]
        params = {"itemId": "c1", "command": "ls", "cwd": "/", "availableDecisions": decisions}
        params |= {"threadId": THREAD, "turnId": TURN}
        send({"id": rid, "method": "item/commandExecution/requestApproval", "params": params})
        answer(rid, started)
        text = json.dumps(read()["result"]["decision"])
    elif MODE == "resolve":
        answer(rid, started)
        steer = read()  # the client steers once its turn runs: then ask
        answer(steer["id"], {"turnId": TURN})
        send({"id": 7, "method": "item/fileChange/requestApproval", "params": _file_change()})
        send({"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": 7}})
        text = json.dumps(read().get("result"))
    elif MODE == "unknown":
        answer(rid, started)
        params = {"threadId": THREAD, "turnId": TURN, "itemId": "q1", "questions": []}
        send({"id": 9, "method": "item/tool/requestUserInput", "params": params})
        text = json.dumps(read().get("error", {}).get("code"))
    else:
        delta(text[: len(text) // 2])  # before the answer: the client keeps it for the turn
        answer(rid, started)
    if MODE == "crash":
        sys.exit(3)
    if MODE == "huge":
        sys.stdout.write("x" * (17 * 1024 * 1024) + "\n")
        sys.stdout.flush()
        return
    if MODE == "garbage":
        sys.stdout.write("not json at all\n")
        sys.stdout.flush()
        return
    if MODE in ("hang", "slow"):
        return
    delta(text[len(text) // 2 :] if MODE == "echo" else text)
    complete()


def _file_change() -> dict[str, Any]:
    return {"threadId": THREAD, "turnId": TURN, "itemId": "p1", "reason": None}


def main() -> None:
    if MODE == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        message = read()
        method, rid, params = message.get("method"), message["id"], message.get("params", {})
        if method == "initialize":
            answer(rid, {"userAgent": "stub", "codexHome": "/", "platformFamily": "unix"})
        elif method in ("thread/start", "thread/resume"):
            answer(rid, {"thread": {"id": params.get("threadId", THREAD)}})
        elif method == "turn/start":
            turn(rid, params["input"][0]["text"])
        elif method == "turn/interrupt" and MODE != "hang":
            answer(rid, {})
            complete("interrupted")
        elif method == "turn/interrupt":
            while True:
                signal.pause()


main()
