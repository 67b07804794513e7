"""A tiny ACP agent for the edge cases no real agent produces on demand. Run as
`python acp_stub.py MODE`; it answers initialize and session/new, then per MODE on a prompt:

- `echo`: streams the prompt text back as two chunks, then ends with end_turn;
- `crash`: exits with status 3 mid-turn;
- `huge`: writes one line over the provider's line limit;
- `garbage`: writes a non-JSON line and a JSON array first, then answers like `echo`;
- `ask`: asks for a permission (options allow / reject) and replies with the chosen option id;
- `hang`: never answers the prompt, ignores SIGTERM and does not exit when stdin closes;
- `old`: answers initialize with protocol version 0;
- `modes`: offers the modes `ask` and `code` in session/new, takes session/set_mode (telling
  the client by `current_mode_update` first), and replies `mode=M` to a prompt;
- `shell`: runs the prompt with /bin/sh and replies with its stdout; it does not exit when
  stdin closes (SIGTERM ends it); `shell-exit`: the same, but it exits then, as most agents do.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

MODE = sys.argv[1]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def update(session: str, kind: str, text: str) -> None:
    content = {"type": "text", "text": text}
    params = {"sessionId": session, "update": {"sessionUpdate": kind, "content": content}}
    send({"jsonrpc": "2.0", "method": "session/update", "params": params})


def main() -> None:
    if MODE == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mode = "ask"
    for line in sys.stdin:
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            version = 0 if MODE == "old" else 1
            send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": version}})
        elif method == "session/new":
            result: dict[str, Any] = {"sessionId": "s1"}
            if MODE == "modes":
                offered = [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]
                result["modes"] = {"currentModeId": mode, "availableModes": offered}
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "session/set_mode":
            mode = message["params"]["modeId"]
            change = {"sessionUpdate": "current_mode_update", "currentModeId": mode}
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {"sessionId": "s1", "update": change},
                }
            )
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "session/prompt":
            text = message["params"]["prompt"][0]["text"]
            if MODE == "crash":
                sys.exit(3)
            if MODE == "huge":
                sys.stdout.write("x" * (17 * 1024 * 1024) + "\n")
                sys.stdout.flush()
                continue
            if MODE == "hang":
                continue
            if MODE == "modes":
                text = f"mode={mode}"
            if MODE in ("shell", "shell-exit"):
                text = subprocess.run(text, shell=True, capture_output=True, text=True).stdout
            if MODE == "garbage":
                sys.stdout.write("not json at all\n[1, 2]\n")
            if MODE == "ask":
                options = [
                    {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                ]
                tool = {"toolCallId": "c1", "title": "touch", "kind": "execute"}
                params = {"sessionId": "s1", "toolCall": tool, "options": options}
                # The same id as the client's prompt: only "method" tells them apart.
                ask = {"jsonrpc": "2.0", "id": rid, "method": "session/request_permission"}
                send(ask | {"params": params})
                answer = json.loads(sys.stdin.readline())
                while "method" in answer:  # session/cancel may come before the answer
                    answer = json.loads(sys.stdin.readline())
                text = json.dumps(answer["result"]["outcome"])
            update("s1", "agent_message_chunk", text[: len(text) // 2])
            update("s1", "agent_message_chunk", text[len(text) // 2 :])
            send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
    while MODE in ("hang", "shell"):
        signal.pause()


main()
