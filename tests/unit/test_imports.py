"""What importing a module of the server really loads and changes, each import in a fresh
interpreter: packages import nothing heavy, lower layers never pull in the manager, the wire
libraries or the optional web and MCP stacks, and no import changes the process (a logging
filter, a handler, a signal handler, a thread).

One interpreter starts, with nothing of corral loaded, and forks once per import: each child
imports one module and reports, so every import starts clean at the cost of one fork (the
children run side by side)."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

from tests.unit.test_layers import ROOT, is_module, layer, sources

_PROBE = r"""
import json, logging, os, signal, sys, tempfile, threading

# The standard library's heavier modules, loaded once before the forks (what is checked is
# corral's and the third-party modules, never these).
import argparse, asyncio, dataclasses, enum, sqlite3, typing, uuid  # noqa: F401


def state():
    loggers = [logging.getLogger()] + [
        l for l in logging.Logger.manager.loggerDict.values() if isinstance(l, logging.Logger)
    ]
    return {
        "filters": sorted(f"{l.name}:{type(f).__name__}" for l in loggers for f in l.filters),
        # A library's NullHandler on its own logger is the logging module's convention.
        "handlers": sorted(
            f"{l.name}:{type(h).__name__}"
            for l in loggers
            for h in l.handlers
            if not isinstance(h, logging.NullHandler)
        ),
        "signals": [repr(signal.getsignal(s)) for s in sorted(signal.valid_signals())],
        "threads": threading.active_count(),
    }


def report(target, before, path):
    for name in target.split(","):  # "a,b,c": all of them, in this order
        __import__(name)
    changed = [k for k, v in state().items() if v != before[k]]
    with open(path, "w") as out:
        json.dump({"target": target, "modules": sorted(sys.modules), "changed": changed}, out)


before = state()
with tempfile.TemporaryDirectory() as folder:
    children = []
    for number, target in enumerate(sys.argv[1:]):
        path = os.path.join(folder, f"{number}.json")
        pid = os.fork()
        if pid == 0:
            try:
                report(target, before, path)
            finally:
                os._exit(0)
        children.append((pid, path))
    for pid, path in children:
        os.waitpid(pid, 0)
        with open(path) as result:
            print(result.read(), flush=True)
"""

# Third-party packages only an edge may load: the gRPC and protobuf runtime, the web stack
# (uvicorn, starlette) and the MCP SDK.
WIRE = ("grpc", "grpc_health", "grpc_reflection", "grpc_status", "google.protobuf", "corral.v1")
API = ("grpc", "grpc_health", "grpc_reflection", "grpc_status", "corral.v1")
OPTIONAL = ("uvicorn", "starlette", "mcp", "corral_server.mcp.server", "corral_server.web.app")

# module -> what importing it must not load (a name stands for it and its submodules).
MUST_NOT_LOAD: dict[str, tuple[str, ...]] = {
    "corral_server.store": ("corral_server.manager", "corral_server.subagents", *WIRE),
    # The rpc edge's error table needs the store's errors, not its tables.
    "corral_server.store.errors": ("corral_server.store.database", "corral_server.records"),
    "corral_server.rpc.errors": ("corral_server.store.sqlite_timeline", "corral_server.manager"),
    # The store's own messages need the protobuf runtime (store/format/), nothing of the API.
    "corral_server.store.subagent_runs": ("corral_server.manager", *API),
    "corral_server.store.format.agents": ("corral_server.manager", "corral_server.rpc", *API),
    "corral_server.records": ("corral_server.store", "corral_server.manager", *WIRE),
    "corral_server.timeline": ("corral_server.timeline.memory",),
    "corral_server.hub": ("corral_server.manager", "corral_server.store", *WIRE),
    "corral_server.subagents.limits": ("corral_server.manager.manager", *WIRE),
    "corral_server.mcp.tokens": ("corral_server.manager", "corral_server.subagents", *WIRE),
    "corral_server.server_info": ("corral_server.app", "corral_server.config", *WIRE),
    "corral_server.manager.manager": ("corral_server.subagents", "corral_server.rpc", *WIRE),
    # What `corral serve` loads before it serves: not the optional stacks, and not the ACP
    # SDK, whose models cost most of a second (loaded with the first ACP session).
    "corral_server.daemon": (*OPTIONAL, "acp", "corral_server.providers.acp"),
    "corral_server.providers.registry": ("acp",),
}


# Every module of the server at once: what no single import may change, none may together.
ALL = ",".join(module for module, _ in sources())


@cache
def loaded() -> dict[str, dict[str, list[str]]]:
    """For each package and each module of MUST_NOT_LOAD: what importing it alone loads
    ("modules") and which parts of the process state it changed ("changed")."""
    packages = [module for module, path in sources() if path.name == "__init__.py"]
    targets = sorted({*packages, *MUST_NOT_LOAD, "corral_server.rpc.errors"})
    missing = [target for target in targets if not is_module(target)]
    assert missing == [], f"MUST_NOT_LOAD names modules that no longer exist: {missing}"
    targets.append(ALL)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *targets],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT.parent,
    )
    reports = [json.loads(line) for line in probe.stdout.splitlines()]
    assert [report["target"] for report in reports] == targets, probe.stderr[-2000:]
    return {report.pop("target"): report for report in reports}


def within(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in names)


def test_importing_a_module_never_loads_what_its_layer_must_not_need() -> None:
    for target, forbidden in MUST_NOT_LOAD.items():
        found = [m for m in loaded()[target]["modules"] if within(m, forbidden)]
        assert found == [], f"import {target} loads {found[:5]}"


def test_a_package_loads_nothing_of_a_layer_above_its_own() -> None:
    for module, path in sources():
        if path.name == "__init__.py" and module != "corral_server":
            above = [
                m
                for m in loaded()[module]["modules"]
                if m.startswith("corral_server.") and layer(m) > layer(module)
            ]
            assert above == [], f"import {module} loads {above[:5]}"


def test_only_the_rpc_and_web_packages_load_grpc_or_protobuf() -> None:
    # The edges, `corral serve` (app.py and the edges), and all modules together may.
    edges = ("corral_server.rpc", "corral_server.web", "corral_server.daemon")
    # The disk is an edge too: the store (its format) loads the protobuf runtime and its own
    # messages, never grpc or the API's.
    disk = ("corral_server.store",)
    for module, report in loaded().items():
        if module != ALL and not within(module, edges):
            forbidden = API if within(module, disk) else WIRE
            found = [m for m in report["modules"] if within(m, forbidden)]
            assert found == [], f"import {module} loads {found[:5]}"


def test_the_sub_agent_and_mcp_packages_import_nothing() -> None:
    for package in ("corral_server.subagents", "corral_server.mcp"):
        ours = [m for m in loaded()[package]["modules"] if m.startswith("corral_server")]
        assert ours == ["corral_server", package]


def test_no_import_changes_logging_signals_or_threads() -> None:
    changed = {module[:60]: r["changed"] for module, r in loaded().items() if r["changed"]}
    assert changed == {}
    assert loaded()[ALL]["changed"] == []  # every module of the server imported at once


def test_importing_the_rpc_error_table_installs_no_logging_filter() -> None:
    # The filter that turns grpc's "client gone" tracebacks into one line is installed where
    # a server is built (rpc/server.py, rpc/standby.py): test_client_gone_log.py.
    assert "corral_server.rpc.errors" in loaded()
    assert loaded()["corral_server.rpc.errors"]["changed"] == []
