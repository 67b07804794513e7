"""What closing an agent must kill: its process group is not enough for Claude Code, whose Bash
commands run in sessions of their own; the environment-tag sweep of `spawn` reaps them."""

from __future__ import annotations

from tests.agents import programs
from tests.agents.child import sweep, tagged_processes
from tests.agents.conftest import Place, Spawn
from tests.agents.test_claude_code import STDIO_PERMISSIONS, run_turn
from tests.support.fake_models import FakeModelServer


async def test_a_background_command_of_claude_code_outlives_its_process_group_until_swept(
    fake: FakeModelServer, place: Place, spawn: Spawn
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url, *STDIO_PERMISSIONS)
    prompt = "[[shell: (sleep 300 > /dev/null 2>&1 &); echo started]] [[reply: ok]]"
    async with spawn(program) as child:
        result, _ = await run_turn(child, prompt, {"behavior": "allow"})
        assert result["result"] == "ok"
        await child.close()  # stdin closed, then SIGTERM / SIGKILL to the process group

        escaped = tagged_processes(programs.LEFTOVER_TAG, program.tag)
        assert len(escaped) == 1 and child.pid not in escaped
        assert sweep(programs.LEFTOVER_TAG, program.tag) == escaped
    # spawn's exit then finds nothing left behind.
