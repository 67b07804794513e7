"""What the old state directory holds: plain domain values, shared by the generator (make.py,
run on the old code) and the test that opens the directory with the new code
(tests/unit/store/test_old_state.py). Only domain types: they read the same in both."""

from __future__ import annotations

from corral_server.domain import agent as da
from corral_server.domain import subagents as ds
from corral_server.domain.content import ImagePart, TextPart
from corral_server.domain.timeline import (
    AssistantMessage,
    Compaction,
    ErrorItem,
    Reasoning,
    SubagentNotice,
    Todo,
    TodoEntry,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.timeline.store import NewRow

LONG_PROMPT = (TextPart("long prompt " * 100), ImagePart("image/png", b"\x89PNG\r\n"))
SHORT_PROMPT = (TextPart("short prompt"),)

PARENT = da.Agent(
    da.AgentId("agent-parent"),
    "scripted",
    "/work/parent",
    da.Running("turn-2"),
    1_700_000_000_123,
    1_700_000_005_456,
    "epoch-parent",
    9,
    model="model-a",
    mode="code",
    title="the parent",
    labels={"team": "blue"},
    attention=da.Attention(True, da.AttentionReason.PERMISSION, 1_700_000_004_000),
    pending_permissions=(
        da.PendingPermission(
            "perm-1",
            "write_file",
            "edit",
            "Write a file",
            {"path": "/work/parent/a.txt", "size": 12, "lines": ["one", "two"]},
            (
                da.PermissionAction("allow", "Allow", "allow_once"),
                da.PermissionAction("deny", "Deny"),
            ),
            "turn-2",
            input_bytes=60,
        ),
    ),
    queued_prompts=(
        da.QueuedPrompt("cm-long", LONG_PROMPT, 1_700_000_004_500, da.QueuedBy.CLIENT),
        da.QueuedPrompt("cm-short", SHORT_PROMPT, 1_700_000_004_600, da.QueuedBy.FOLLOW_UP),
    ),
    provider_session_id="session-parent",
    last_usage=da.Usage(100, 20, 5, 0.25),
)

CHILD = da.Agent(
    id=da.AgentId("agent-child"),
    provider="scripted",
    cwd="/work/child",
    lifecycle=da.Errored(da.AgentError("the provider went away", "PROVIDER_LOST")),
    created_at_ms=1_700_000_001_000,
    updated_at_ms=1_700_000_003_000,
    epoch="epoch-child",
    next_seq=3,
    labels={da.PARENT_AGENT_ID_LABEL: "agent-parent", "corral.subagent-run-id": "run-1"},
    last_error=da.AgentError("the provider went away", "PROVIDER_LOST"),
)

ARCHIVED = da.Agent(
    id=da.AgentId("agent-archived"),
    provider="scripted",
    cwd="/work/old",
    lifecycle=da.Closed(1_700_000_002_000),
    created_at_ms=1_700_000_000_500,
    updated_at_ms=1_700_000_002_500,
    epoch="epoch-archived",
    next_seq=1,
    archived_at_ms=1_700_000_002_400,
)

AGENTS = (PARENT, CHILD, ARCHIVED)  # in creation order (the order they were first put)

PARENT_ROWS = (
    NewRow(UserMessage("hello", "cm-0", "msg-u"), 1_700_000_000_200, "turn-1"),
    NewRow(Reasoning("thinking it over"), 1_700_000_000_300, "turn-1"),
    NewRow(AssistantMessage("hi there", "msg-a"), 1_700_000_000_400, "turn-1", "prov-1"),
    NewRow(
        ToolCall(
            "call-1",
            "read_file",
            ToolCallStatus.COMPLETED,
            {"path": "a.txt", "limit": 10, "nested": {"deep": [1, 2.5, None, True]}},
            "file contents",
        ),
        1_700_000_000_500,
        "turn-1",
    ),
    NewRow(Todo((TodoEntry("write it"), TodoEntry("test it", True))), 1_700_000_000_600, "turn-1"),
    NewRow(ErrorItem("something failed", "E_FAIL"), 1_700_000_000_700, "turn-1"),
    NewRow(Compaction("the story so far"), 1_700_000_000_800, "turn-2"),
    NewRow(
        SubagentNotice("run-1", "agent-child", "the child is done"), 1_700_000_000_900, "turn-2"
    ),
)
# Echo reconciliation gave the user message its provider id after it was appended.
PARENT_PROVIDER_MESSAGE_ID = (1, "prov-0")

CHILD_ROWS = (
    NewRow(UserMessage("do the task"), 1_700_000_001_100, "turn-c"),
    NewRow(AssistantMessage("done"), 1_700_000_001_200, "turn-c"),
)

# Positional, in the order of ds.SubagentRun's fields.
RUN_BARE = ds.SubagentRun(
    ds.RunId("run-0"), "", "agent-parent", "agent-parent", "claimed", 1_700_000_000_950, 1
)
RUN_FULL = ds.SubagentRun(
    ds.RunId("run-1"),
    "agent-child",
    "agent-parent",
    "agent-parent",
    "do the task",
    1_700_000_001_000,
    1,
    "worker",
    ds.Cleanup.DELETE,
    600,
    True,
    1_700_000_001_050,
    1_700_000_003_000,
    ds.Outcome.ERROR,
    "the provider went away",
    "partial result",
    da.Usage(10, 2, 0, 0.01),
    ds.AnnounceState.DEFERRED,
    1_700_000_003_100,
    2,
    ds.Delivering("epoch-parent", 8),
    None,
)
RUNS = (RUN_BARE, RUN_FULL)

EVENTS = ((1, "agent-parent", b"event-one"), (2, "", b"event-two"), (3, "agent-child", b"three"))
INCARNATION = "0123456789abcdef0123456789abcdef"
CREATE_REQUEST = ("request-1", b"fingerprint-1", "agent-parent", 1_700_000_000_100)
FINISHED_TURNS = (("agent-parent", "turn-1"), ("agent-child", "turn-c"))
