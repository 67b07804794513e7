"""Every message stays under a default client's 4 MiB, whatever an agent holds: one agent with
every field at its limit (a title and 64 labels of 4-byte characters, 32 queued prompts, 8 of
them of the largest size, 64 pending permissions with 200 kB inputs) is read by a default
gRPC client (no raised limits) through every listing and stream. The queued prompts come back
whole from GetQueuedPrompt, and storing them costs about their size on disk, not a multiple."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.manager.actor_prompts import MAX_QUEUED_PROMPTS
from corral_server.manager.permissions import MAX_PENDING_PERMISSIONS
from corral_server.manager.validate import Limits
from tests.support.client import Stubs, create_request, error_details, prompt_request, text
from tests.support.daemon import DaemonThread

CLIENT_LIMIT = 4 * 1024 * 1024  # gRPC's default receive limit
LIMITS = Limits()
WIDE = "\U0001f600"  # 4 bytes of UTF-8: the most a character costs
# Each request's input: far past what a listing shows of it (many megabytes in all), within
# what a request in full keeps (the cut at MAX_INPUT_BYTES is tests/unit/manager's).
INPUT_BYTES = 200_000
# Queued prompts at the largest size (the rest of the queue, to its count limit, is short).
LARGEST = 8


def queued_prompt(n: int) -> list[content_pb.ContentPart]:
    """A prompt at the size limits: its text at max_prompt_bytes (3-byte characters), an
    image taking what is left of max_prompt_chars."""
    head = f"/reply queued {n}\n"
    fill = "€" * ((LIMITS.max_prompt_bytes - len(head)) // 3)
    image_bytes = LIMITS.max_prompt_chars - len(head) - len(fill) - 64
    image = content_pb.Image(mime_type="image/png", data=bytes([n]) * image_bytes)
    return [content_pb.ContentPart(text=head + fill), content_pb.ContentPart(image=image)]


def state_bytes(state: Path) -> int:
    return sum(f.stat().st_size for f in state.iterdir() if f.is_file())


async def read_until(call: Any, done: Any) -> list[Any]:
    """Every response of `call` until one holds an event for which `done` is true."""
    responses = []
    while True:
        response = await call.read()
        assert response is not grpc.aio.EOF, "the stream ended"
        responses.append(response)
        if any(done(e) for e in response.events):
            return responses


async def test_every_message_fits_a_default_client_with_every_field_at_its_limit(
    tmp_path: Path,
) -> None:
    daemon = DaemonThread(Config(state_dir=tmp_path / "state")).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:  # default limits
            await _fill_and_read(Stubs.of(channel), str(tmp_path))
    finally:
        daemon.stop()


async def _fill_and_read(stubs: Stubs, cwd: str) -> None:
    labels = {f"k{i:02d}" + WIDE * 253: WIDE * 256 for i in range(LIMITS.max_labels)}
    create = create_request(cwd, title=WIDE * LIMITS.max_title_chars, labels=labels)
    agent_id = (await stubs.agents.CreateAgent(create)).agent.id

    # 1. A turn that asks 64 permissions at once, each with an input past the cut.
    asking = f"/permissions {MAX_PENDING_PERMISSIONS} {INPUT_BYTES}"
    turn = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(asking))
    )
    streamed: list[Any] = []
    while sum(r.HasField("permission_requested") for r in streamed) < MAX_PENDING_PERMISSIONS:
        response = await turn.read()
        assert response is not grpc.aio.EOF, "the turn's stream ended"
        streamed.append(response)

    # 2. The queue filled to its count limit, with prompts at the size limits.
    sent = [queued_prompt(n) for n in range(LARGEST)]
    sent += [text(f"/reply queued {n}", "y" * 1_000) for n in range(LARGEST, MAX_QUEUED_PROMPTS)]
    for n, content in enumerate(sent):
        await stubs.turns.SendPrompt(
            turn_pb.SendPromptRequest(
                agent_id=agent_id,
                content=content,
                client_message_id=f"cm-{n}",
                if_running=turn_pb.IF_RUNNING_QUEUE,
            )
        )

    # 3. Every listing and stream, read by the default client.
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert len(agent.queued_prompts) == MAX_QUEUED_PROMPTS
    assert len(agent.pending_permissions) == MAX_PENDING_PERMISSIONS
    assert agent.ByteSize() < CLIENT_LIMIT // 2
    listed = await stubs.agents.ListAgents(svc_pb.ListAgentsRequest())
    assert [a.id for a in listed.agents] == [agent_id]
    snapshot = stubs.events.Subscribe(event_pb.SubscribeRequest())
    replay = stubs.events.Subscribe(event_pb.SubscribeRequest(resume_revision=0))
    try:
        snapshots = await read_until(snapshot, lambda e: e.HasField("synced"))
        assert any(e.HasField("agent_upserted") for r in snapshots for e in r.events)
        replayed = await read_until(
            replay,
            lambda e: (
                e.HasField("agent_upserted")
                and len(e.agent_upserted.agent.queued_prompts) == MAX_QUEUED_PROMPTS
            ),
        )
    finally:
        snapshot.cancel()
        replay.cancel()
    kinds = {e.WhichOneof("payload") for r in replayed for e in r.events}
    assert {"agent_upserted", "permission_requested"} <= kinds
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    for message in (agent, listed, page, *snapshots, *replayed, *streamed):
        assert message.ByteSize() < CLIENT_LIMIT

    # 4. What the listings summarise comes whole from its own call.
    for n, (content, summary) in enumerate(zip(sent, agent.queued_prompts, strict=True)):
        assert summary.client_message_id == f"cm-{n}" and summary.clipped
        assert summary.queued_by == "client" and summary.image_count == (n < LARGEST)
        assert summary.text_bytes == len(content[0].text.encode())
        assert summary.preview == content[0].text[:256]
        assert list(summary.content) == [content_pb.ContentPart(text=summary.preview)]
        full = await stubs.turns.GetQueuedPrompt(
            turn_pb.GetQueuedPromptRequest(agent_id=agent_id, client_message_id=f"cm-{n}")
        )
        assert list(full.prompt.content) == content and not full.prompt.clipped
    listed_permission = agent.pending_permissions[0]
    assert listed_permission.input_clipped and listed_permission.input_bytes > INPUT_BYTES
    shown = listed_permission.input.fields["content"].string_value
    assert len(shown) < 4_096 and shown.startswith("xxxx") and "[cut by corral:" in shown
    full_permission = await stubs.turns.GetPendingPermission(
        turn_pb.GetPendingPermissionRequest(agent_id=agent_id, request_id=listed_permission.id)
    )
    assert not full_permission.permission.input_clipped
    assert full_permission.permission.input.fields["content"].string_value == "x" * INPUT_BYTES
    turn.cancel()


async def test_a_queued_prompt_is_not_found_once_removed_or_run(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 5003", "/reply first"))
    await asyncio.to_thread(daemon.clock.wait_for_timer, 5003)
    for n in (1, 2):
        queue = turn_pb.IF_RUNNING_QUEUE
        await stubs.turns.SendPrompt(
            prompt_request(
                agent_id, f"/reply queued {n}", client_message_id=f"cm-{n}", if_running=queue
            )
        )
    got = await get_queued(stubs, agent_id, "cm-1")
    assert got.prompt.content[0].text == "/reply queued 1" and not got.prompt.clipped
    await stubs.turns.RemoveQueuedPrompt(
        turn_pb.RemoveQueuedPromptRequest(agent_id=agent_id, client_message_id="cm-1")
    )
    await expect_not_found(get_queued(stubs, agent_id, "cm-1"), "QUEUED_PROMPT_NOT_FOUND")
    await daemon.advance_async(5003)
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    await expect_not_found(get_queued(stubs, agent_id, "cm-2"), "QUEUED_PROMPT_NOT_FOUND")
    asked = turn_pb.GetPendingPermissionRequest(agent_id=agent_id, request_id="p-none")
    await expect_not_found(stubs.turns.GetPendingPermission(asked), "PERMISSION_NOT_FOUND")


async def get_queued(stubs: Stubs, agent_id: str, client_message_id: str) -> Any:
    request = turn_pb.GetQueuedPromptRequest(agent_id=agent_id, client_message_id=client_message_id)
    return await stubs.turns.GetQueuedPrompt(request)


async def expect_not_found(call: Any, reason: str) -> None:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        details = error_details(err)
        assert (details.code, details.reason) == (grpc.StatusCode.NOT_FOUND, reason)
    else:
        raise AssertionError(f"expected NOT_FOUND / {reason}")


async def test_large_queued_prompts_are_stored_once_and_run_in_order_after_a_restart(
    tmp_path: Path,
) -> None:
    """The state directory grows by about the prompts' size (the daemon stopped between the
    measures, so its write-ahead log is folded in and gone), and after a restart the prompts
    run, in order, with their text whole."""
    state = tmp_path / "state"
    config = Config(state_dir=state)
    sent = [queued_prompt(n) for n in range(LARGEST)]
    first = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    finally:
        first.stop()
    before = state_bytes(state)
    second = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 600000"))
            await asyncio.to_thread(second.clock.wait_for_timer, 600_000)
            for n, content in enumerate(sent):
                queue = turn_pb.IF_RUNNING_QUEUE
                request = turn_pb.SendPromptRequest(
                    agent_id=agent_id,
                    content=content,
                    client_message_id=f"cm-{n}",
                    if_running=queue,
                )
                await stubs.turns.SendPrompt(request)
    finally:
        second.stop()  # the turn never ends on this daemon; the queue is stored
    grown = state_bytes(state) - before
    prompt_bytes = sum(sum(part.ByteSize() for part in content) for content in sent)
    assert prompt_bytes > 4 * CLIENT_LIMIT
    assert grown < 1.25 * prompt_bytes, (grown, prompt_bytes)
    third = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(third.address) as channel:
            stubs = Stubs.of(channel)
            await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
            assert not agent.queued_prompts
            rows = await every_row(stubs, agent_id)
    finally:
        third.stop()
    said = [r.item.assistant_message.text for r in rows if r.item.assistant_message.text]
    assert said == [f"queued {n}" for n in range(LARGEST)]
    users = [r.item.user_message for r in rows if r.item.user_message.client_message_id]
    assert [(u.client_message_id, u.text) for u in users[-LARGEST:]] == [
        (f"cm-{n}", content[0].text) for n, content in enumerate(sent)
    ]


async def every_row(stubs: Stubs, agent_id: str) -> list[Any]:
    """The whole timeline, page by page (a page stays under the client's limit: megabyte rows
    take several)."""
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    page = await stubs.timeline.FetchTimeline(request)
    rows = list(page.rows)
    while page.has_older:
        page = await stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(
                agent_id=agent_id,
                direction=tl_pb.TIMELINE_DIRECTION_BEFORE,
                cursor=page.start_cursor,
                limit=0,
            )
        )
        assert page.ByteSize() < CLIENT_LIMIT
        rows[:0] = page.rows
    return rows


async def test_a_list_of_agents_with_every_label_at_its_limit_is_paged_under_the_limit(
    tmp_path: Path,
) -> None:
    """100 such agents are 13 MB: a page ends early, and its token leads to the rest."""
    labels = {f"k{i:02d}" + WIDE * 253: WIDE * 256 for i in range(LIMITS.max_labels)}
    daemon = DaemonThread(Config()).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:  # default limits
            stubs = Stubs.of(channel)
            created = [
                (
                    await stubs.agents.CreateAgent(create_request(str(tmp_path), labels=labels))
                ).agent.id
                for _ in range(40)
            ]
            listed: list[str] = []
            pages = 0
            token = ""
            while True:
                page = await stubs.agents.ListAgents(svc_pb.ListAgentsRequest(page_token=token))
                assert page.agents and page.ByteSize() < CLIENT_LIMIT
                listed += [a.id for a in page.agents]
                pages += 1
                token = page.next_page_token
                if not token:
                    break
    finally:
        daemon.stop()
    assert listed == created and pages >= 2
