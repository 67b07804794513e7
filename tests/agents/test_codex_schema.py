"""Protocol drift fails loudly: the pinned codex's `app-server generate-json-schema` output must
equal the committed snapshot (tests/agents/codex_schema/), byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.agents import programs

SNAPSHOT = Path(__file__).with_name("codex_schema") / "codex_app_server_protocol.schemas.json"
BUNDLE = SNAPSHOT.name


def generate(tmp_path: Path) -> bytes:
    assert programs.installed("codex"), "codex is not installed: run buildscripts/test"
    out, home = tmp_path / "schema", tmp_path / "codex-home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(home)}
    argv = [str(programs.BIN / "codex"), "app-server", "generate-json-schema", "--experimental"]
    subprocess.run([*argv, "--out", str(out)], env=env, check=True, capture_output=True, timeout=60)
    return (out / BUNDLE).read_bytes()


def changed_definitions(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The definitions (v2's by their `v2/` path) that were added, removed or changed."""

    def flat(bundle: dict[str, Any]) -> dict[str, Any]:
        defs = dict(bundle.get("definitions", {}))
        v2 = defs.pop("v2", {})
        return defs | {f"v2/{name}": schema for name, schema in v2.items()}

    before, after = flat(old), flat(new)
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def updating(environ: Mapping[str, str]) -> bool:
    """Whether this run refreshes the snapshot: CORRAL_UPDATE_CODEX_SCHEMA=1, never under CI
    (a CI run that rewrote the snapshot would pass whatever codex now speaks)."""
    if environ.get("CORRAL_UPDATE_CODEX_SCHEMA") != "1":
        return False
    if environ.get("CI"):
        raise RuntimeError(
            "CORRAL_UPDATE_CODEX_SCHEMA=1 is refused under CI (CI is set): refresh the codex "
            "schema snapshot on a workstation and commit it (tests/agents/codex_schema/README.md)"
        )
    return True


def test_the_pinned_codex_speaks_the_protocol_of_the_committed_snapshot(tmp_path: Path) -> None:
    update = updating(os.environ)
    generated = generate(tmp_path)
    if update:
        SNAPSHOT.write_bytes(generated)
    committed = SNAPSHOT.read_bytes()
    if generated != committed:
        changed = changed_definitions(json.loads(committed), json.loads(generated))
        raise AssertionError(
            f"codex's app-server protocol changed ({len(changed)} definitions: "
            f"{', '.join(changed[:40])}); see tests/agents/codex_schema/README.md"
        )


def test_a_snapshot_update_is_refused_under_ci_and_taken_only_when_asked() -> None:
    with pytest.raises(RuntimeError, match="refused under CI"):
        updating({"CORRAL_UPDATE_CODEX_SCHEMA": "1", "CI": "true"})
    assert updating({"CORRAL_UPDATE_CODEX_SCHEMA": "1"})
    assert not updating({"CI": "true"})
    assert not updating({})


def test_a_changed_definition_is_named() -> None:
    old = {"definitions": {"A": {"type": "string"}, "v2": {"B": {}, "C": {}}}}
    new = {"definitions": {"A": {"type": "string"}, "v2": {"B": {"x": 1}, "D": {}}}}
    assert changed_definitions(old, new) == ["v2/B", "v2/C", "v2/D"]
