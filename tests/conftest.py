"""Fixtures: a real daemon on a loopback port, reached through pytest-grpc's fixtures.

`grpc_server` is ours (the real grpc.aio daemon in a thread, with a FakeClock the test can
advance); pytest-grpc's `grpc_addr`, `grpc_channel` and `grpc_stub` build on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from hypothesis import settings

from corral_server.app import Config
from corral_server.manager.specs import Timeouts
from tests.support.daemon import DaemonThread

# No per-example deadline: on 2 loaded cores a slow example is noise, not a failure (the suite
# asserts behaviour; timing is measured by buildscripts/bench).
settings.register_profile("corral", deadline=None)
settings.load_profile("corral")


def test_config() -> Config:
    # Cancel waits are short and measured on the FakeClock: tests advance past them.
    return Config(timeouts=Timeouts(interrupt_s=5.0, settle_s=10.0))


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[DaemonThread]:
    daemon = DaemonThread(test_config()).start()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def grpc_addr(grpc_server: DaemonThread) -> str:
    return grpc_server.address


@pytest.fixture
def daemon(grpc_server: DaemonThread) -> DaemonThread:
    return grpc_server


@pytest.fixture
async def aio_channel(grpc_addr: str) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(grpc_addr) as channel:
        yield channel
