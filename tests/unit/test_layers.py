"""The server's layers, read from its source: a module imports only from its own layer and the
layers below, and only the edges import grpc or protobuf.

Every import counts, also under `if TYPE_CHECKING:` and inside functions: a cycle the type
checker alone sees is still a cycle for the reader. tests/unit/test_imports.py checks what an
import really loads, in a fresh interpreter."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import corral_server

ROOT = Path(corral_server.__file__).parent

# Lowest first. A package (a folder of corral_server) or a top-level module is in one layer.
LAYERS: tuple[frozenset[str], ...] = (
    # plain values, the exception tree, small utilities
    frozenset(
        {
            "domain",
            "errors",
            "clock",
            "varint",
            "histogram",
            "jobs",
            "logs",
            "gc_tuning",
            "reclaim",
            "listen",
            "server_info",
        }
    ),
    frozenset({"records", "timeline", "providers"}),  # record protocols, timelines, agents
    # the event hub; the SQLite implementations; git; the cluster's log and leases on JetStream
    # (low, so that the hub and the store can write through it)
    frozenset({"hub", "store", "workspace", "cluster"}),
    frozenset({"manager"}),  # the single writer of every agent
    frozenset({"subagents", "schedules"}),  # run trees, schedules: on the manager's methods
    frozenset({"rpc", "web", "mcp", "metrics", "metrics_http", "asgi_server"}),  # the edges
    # the daemon's parts
    frozenset({"config", "config_reload", "durable", "edges", "drain", "provider_set"}),
    frozenset({"app"}),  # the daemon assembled and wired
    frozenset({"daemon", "serve_flags", "state_lock", "startup_line"}),  # `corral serve`
)

# Imports across layers that are known and wait for a move (module -> module it may import).
# Only ever shrinks: an entry that no longer occurs fails too, so the list empties.
WAITING: frozenset[tuple[str, str]] = frozenset()

# Only these import grpc, protobuf or the generated corral.v1 modules.
EDGES = ("corral_server.rpc.", "corral_server.web.", "corral_server.app")
WIRE = ("grpc", "grpc_health", "grpc_reflection", "grpc_status", "google", "corral")
# The disk is an edge too: the store's format, and only it, imports protobuf and the store's
# own messages (corral.storage), never grpc or the API's (corral.v1).
STORAGE_FORMAT = "corral_server.store.format"
STORAGE_WIRE = ("google.protobuf", "corral.storage")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.rglob("*.py")):
        if "_pb2" not in path.name:
            yield module_name(path), path


def is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (ROOT / relative).is_dir() or (ROOT / relative).with_suffix(".py").is_file()


def imports(path: Path) -> Iterator[str]:
    """The names of what `path` imports: modules, and for `from package import module` the
    module."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            for alias in node.names:
                if node.module.startswith("corral_server") and is_module(
                    f"{node.module}.{alias.name}"
                ):
                    yield f"{node.module}.{alias.name}"


def part(module: str) -> str:
    """The package or top-level module of `module` ("corral_server" itself for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer(module: str) -> int:
    name = part(module)
    for number, members in enumerate(LAYERS):
        if name in members:
            return number
    raise AssertionError(f"{module}: not in any layer of LAYERS")


def test_every_package_and_top_level_module_has_a_layer() -> None:
    for module, _ in sources():
        if module != "corral_server":
            layer(module)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, path in sources()
        if module != "corral_server"
        for target in imports(path)
        if target.startswith("corral_server.")
        and layer(target) > layer(module)
        and (module, target) not in WAITING
    ]
    assert upward == []


def test_every_waiting_import_still_occurs() -> None:
    edges = {(module, target) for module, path in sources() for target in imports(path)}
    assert WAITING - edges == set()


def test_only_the_edges_import_grpc_or_protobuf() -> None:
    wire = [
        f"{module} imports {target}"
        for module, path in sources()
        if not module.startswith(EDGES)
        for target in imports(path)
        if target.split(".")[0] in WIRE
        and not (module.startswith(STORAGE_FORMAT) and target.startswith(STORAGE_WIRE))
    ]
    assert wire == []


def test_the_layers_name_only_what_exists() -> None:
    present = {part(module) for module, _ in sources()}
    assert set().union(*LAYERS) <= present


def test_only_the_cluster_imports_nats() -> None:
    outside = [
        f"{module} imports {target}"
        for module, path in sources()
        if not module.startswith("corral_server.cluster")
        for target in imports(path)
        if target.split(".")[0] == "nats"
    ]
    assert outside == []
