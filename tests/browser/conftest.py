"""Fixtures of the browser tests: one headless chromium per module (tests/browser/browser.py)
and a real daemon with its web port on, serving the built dashboard."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from corral_server.app import Config
from corral_server.clock import FakeClock
from corral_server.manager.specs import Timeouts
from corral_server.providers.config import load as load_providers
from tests.browser.browser import Browser
from tests.support.client import Stubs, SyncStubs
from tests.support.daemon import DaemonThread

# A second scripted provider from a providers file, one that takes steered prompts.
PROVIDERS_FILE = """
[providers.steerer]
kind = "scripted"
steer = true
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser()
    yield b
    b.close()


class Web:
    """A daemon in this process (FakeClock) with gRPC for the test and the web port for the page."""

    def __init__(self, daemon: DaemonThread, channel: grpc.Channel) -> None:
        self.daemon = daemon
        self.stubs = Stubs.of(channel)
        assert daemon.daemon is not None
        self.url = f"http://127.0.0.1:{daemon.daemon.web_port}/"

    def advance(self, ms: int) -> None:
        self.daemon.advance(ms)


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    path: Path = tmp_path_factory.mktemp("providers") / "providers.toml"
    path.write_text(PROVIDERS_FILE)
    config = Config(
        web_listen="127.0.0.1:0",
        providers=tuple(load_providers(path)),
        timeouts=Timeouts(interrupt_s=5.0, settle_s=10.0),
    )
    daemon = DaemonThread(config, FakeClock()).start()
    channel = grpc.insecure_channel(daemon.address)
    try:
        yield Web(daemon, channel)
    finally:
        channel.close()
        daemon.stop()


@contextlib.contextmanager
def page_daemon(config: Config) -> Iterator[tuple[str, SyncStubs]]:
    """A daemon of `config` (its web port on, a FakeClock): the page's URL and gRPC stubs."""
    daemon = DaemonThread(replace(config, web_listen="127.0.0.1:0"), FakeClock()).start()
    channel = grpc.insecure_channel(daemon.address)
    try:
        assert daemon.daemon is not None
        yield f"http://127.0.0.1:{daemon.daemon.web_port}/", Stubs.of(channel)
    finally:
        channel.close()
        daemon.stop()
