"""A tiny stand-in for `claude -p` in stream-json mode, for the edge cases the real program does
not produce on demand. Run as `python claude_code_stub.py MODE [claude's flags...]`; it answers
the `initialize` control request, then per MODE on each user line:

- `echo`: system init, the prompt text streamed as two deltas, its whole `assistant` line, a
  success result with usage;
- `whole`: the same without stream events (as without `--include-partial-messages`);
- `newid`: as `echo`, but it reports a session id other than the one it was given;
- `ask`: asks `can_use_tool` for a Bash call, then replies with the JSON of the answer;
- `withdraw`: asks `can_use_tool`, then on an interrupt withdraws the request
  (`control_cancel_request`), confirms and ends with `error_during_execution`; the next turn
  replies `late answer` if a control response came that nobody asked for, else `clean`;
- `slow`: streams one delta and waits: an interrupt is confirmed and the turn ends with
  `error_during_execution`;
- `refuse`: as `slow`, but refuses the first interrupt, streams on and confirms the second;
- `api`: an API error result (`success`, `is_error`, `api_error_status` 500);
- `crash`: exits with status 3 mid-turn; `huge`: writes one line over the line limit;
  `garbage`: writes a line that is not JSON;
- `gone`: writes an error result and exits at start, as claude does for an unknown `--resume`;
- `hang`: ignores SIGTERM and stdin's end, and starts a sleeper in a session of its own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

MODE = sys.argv[1]
FLAGS = sys.argv[2:]


def flag(name: str) -> str:
    return FLAGS[FLAGS.index(name) + 1] if name in FLAGS else ""


SESSION = "reported-by-claude" if MODE == "newid" else flag("--session-id") or flag("--resume")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    message: dict[str, Any] = json.loads(line)
    return message


def delta(message_id: str, index: int, text: str) -> None:
    event = {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }
    send({"type": "stream_event", "event": event, "api_message_id": message_id})


def block_start(message_id: str, index: int) -> None:
    event = {"type": "content_block_start", "index": index, "content_block": {"type": "text"}}
    send({"type": "stream_event", "event": event, "api_message_id": message_id})


def assistant(message_id: str, block: dict[str, Any]) -> None:
    send({"type": "assistant", "message": {"id": message_id, "content": [block]}})


def result(subtype: str = "success", **extra: Any) -> None:
    usage = {"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 2}
    costs = {"model": {"costUSD": 0.25}}
    body = {"type": "result", "subtype": subtype, "is_error": subtype != "success"}
    send(
        body
        | {"session_id": SESSION, "usage": usage, "model_usage_since_last_result": costs}
        | extra
    )


def reply(message_id: str, text: str) -> None:
    if MODE != "whole":
        block_start(message_id, 0)
        delta(message_id, 0, text[: len(text) // 2])
        delta(message_id, 0, text[len(text) // 2 :])
    assistant(message_id, {"type": "text", "text": text})
    result()


def ask(request_id: str) -> None:
    assistant(
        "m-tool", {"type": "tool_use", "id": "call-1", "name": "Bash", "input": {"command": "ls"}}
    )
    request = {
        "subtype": "can_use_tool",
        "tool_name": "Bash",
        "input": {"command": "ls"},
        "tool_use_id": "call-1",
    }
    send({"type": "control_request", "request_id": request_id, "request": request})


def answer(request_id: str, response: dict[str, Any]) -> None:
    body = {"subtype": "success", "request_id": request_id, "response": response}
    send({"type": "control_response", "response": body})


def turn(message: dict[str, Any], number: int, withdrawn: list[str]) -> None:
    text = message["message"]["content"][0]["text"]
    message_id = f"m{number}"
    if MODE == "crash":
        sys.exit(3)
    if MODE == "huge":
        sys.stdout.write("x" * (17 * 1024 * 1024) + "\n")
        sys.stdout.flush()
        return
    if MODE == "garbage":
        sys.stdout.write("Warning: not json at all\n")
        sys.stdout.flush()
        return
    if MODE == "api":
        result("success", is_error=True, api_error_status=500, result="API Error: 500 boom")
        return
    if MODE == "ask":
        ask("perm-1")
        got = read()
        content = [{"type": "tool_result", "tool_use_id": "call-1", "content": "listed"}]
        send({"type": "user", "message": {"role": "user", "content": content}})
        reply(message_id, json.dumps(got["response"]["response"], sort_keys=True))
        return
    if MODE == "withdraw" and not withdrawn:
        ask("perm-1")
        interrupt = read()
        send({"type": "control_cancel_request", "request_id": "perm-1"})
        withdrawn.append("perm-1")
        answer(interrupt["request_id"], {"still_queued": []})
        result("error_during_execution")
        return
    if MODE == "withdraw":
        reply(message_id, "late answer" if withdrawn[1:] else "clean")
        return
    if MODE in ("slow", "refuse"):
        block_start(message_id, 0)
        delta(message_id, 0, "tick ")
        interrupt = read()
        if MODE == "slow":
            answer(interrupt["request_id"], {"still_queued": []})
            result("error_during_execution")
            return
        body = {"subtype": "error", "request_id": interrupt["request_id"], "error": "not now"}
        send({"type": "control_response", "response": body})
        delta(message_id, 0, "tock ")
        interrupt = read()  # the second one is confirmed
        answer(interrupt["request_id"], {"still_queued": []})
        result("error_during_execution")
        return
    reply(message_id, text)


def main() -> None:
    if MODE == "gone":
        result("error_during_execution", errors=["No conversation found with session ID: x"])
        sys.exit(1)
    if MODE == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
        subprocess.Popen(sleeper, start_new_session=True)
    number = 0
    withdrawn: list[str] = []
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        message = json.loads(line)
        kind = message.get("type")
        if kind == "control_request":
            answer(message["request_id"], {"commands": []})  # initialize (or an idle interrupt)
        elif kind == "control_response":
            withdrawn.append("an answer nobody asked for")
        elif kind == "user":
            number += 1
            send({"type": "system", "subtype": "init", "session_id": SESSION})
            turn(message, number, withdrawn)
    while MODE == "hang":
        signal.pause()


main()
