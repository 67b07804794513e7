"""The one table from domain errors to gRPC statuses (rpc/errors.py)."""

from __future__ import annotations

from pathlib import Path

import grpc

from corral_server import errors
from corral_server.rpc.errors import status_code_for, to_status
from corral_server.store.errors import StoreWriteFailed


def test_a_store_that_cannot_write_answers_unavailable() -> None:
    error = StoreWriteFailed(Path("/state/corral.db"), "database or disk is full")
    assert status_code_for(error) is grpc.StatusCode.UNAVAILABLE
    assert to_status(error).code is grpc.StatusCode.UNAVAILABLE


def test_a_standby_and_a_provider_timeout_have_their_codes() -> None:
    assert status_code_for(errors.Standby()) is grpc.StatusCode.UNAVAILABLE
    timeout = errors.ProviderTimeout("start_turn", 30)
    assert status_code_for(timeout) is grpc.StatusCode.DEADLINE_EXCEEDED
