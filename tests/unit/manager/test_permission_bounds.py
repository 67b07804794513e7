"""A provider's permission request is bounded at admission (manager/permissions.py): what a
request in full keeps, what a listing shows of it, and that ids are never cut (the answer names
them). Sizes are checked against protobuf's own encoding."""

from __future__ import annotations

from corral_server.domain.agent import PendingPermission, PermissionAction
from corral_server.manager.permissions import (
    MAX_ACTION_BYTES,
    MAX_ACTIONS,
    MAX_INPUT_BYTES,
    MAX_NAME_BYTES,
    MAX_TITLE_BYTES,
    PREVIEW_INPUT_BYTES,
    admitted,
    cut_object,
)
from corral_server.rpc.convert import permission_to_pb

WIDE = "\U0001f600"


def asked(**input: object) -> PendingPermission:
    return PendingPermission(
        id="p-" + "i" * 2_000,
        name=WIDE * 5_000,
        kind="tool",
        title=WIDE * 5_000,
        input=input,  # type: ignore[arg-type]
        actions=tuple(PermissionAction(f"a{n}", WIDE * 1_000) for n in range(40)),
    )


def test_a_request_in_full_keeps_a_megabyte_of_input_and_bounded_text() -> None:
    permission = admitted(asked(path="/x", content="y" * 5_000_000), "t1")
    assert permission.id == "p-" + "i" * 2_000 and permission.turn_id == "t1"
    assert len(permission.name.encode()) <= MAX_NAME_BYTES
    assert len(permission.title.encode()) <= MAX_TITLE_BYTES
    assert [a.id for a in permission.actions] == [f"a{n}" for n in range(MAX_ACTIONS)]
    assert all(len(a.label.encode()) <= MAX_ACTION_BYTES for a in permission.actions)
    assert permission.input_bytes > 5_000_000
    full = permission_to_pb(permission)
    assert full.input_clipped and full.input.fields["path"].string_value == "/x"
    assert MAX_INPUT_BYTES // 2 < full.input.ByteSize() <= MAX_INPUT_BYTES
    assert full.input.fields["content"].string_value.startswith("yyyy")
    listed = permission_to_pb(permission, listed=True)
    assert listed.input_clipped and listed.input_bytes == permission.input_bytes
    assert listed.input.ByteSize() <= PREVIEW_INPUT_BYTES
    assert listed.ByteSize() < 20_000  # 64 of them: far under 4 MiB


def test_a_small_input_is_shown_whole_everywhere() -> None:
    permission = admitted(asked(command="ls -la"), "t1")
    assert permission.input_preview is None
    for listed in (False, True):
        msg = permission_to_pb(permission, listed=listed)
        assert not msg.input_clipped and msg.input.fields["command"].string_value == "ls -la"


def test_cut_object_keeps_the_first_entries_and_says_how_many_it_left_out() -> None:
    value = {f"k{n}": "v" * 1_000 for n in range(100)}
    cut = cut_object(value, 4_096)
    kept = [k for k in cut if k != "…"]
    assert kept == [f"k{n}" for n in range(len(kept))] and 2 <= len(kept) < 5
    assert cut["…"] == f"[cut by corral: {100 - len(kept)} more entries]"
