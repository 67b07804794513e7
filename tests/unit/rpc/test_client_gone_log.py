"""rpc/errors.py: grpc's ERROR traceback for a client that left becomes one INFO line.

The record is the one grpc.aio logged when a default client refused a 5.7 MB FetchTimeline
page (seen on the daemon's stderr before pages were cut by bytes): logger grpc._cython.cygrpc,
ERROR, "ExecuteBatchError raised in core by servicer method [/corral.v1.TimelineService/
FetchTimeline]" with a traceback. Reproducing it through the wire depends on how far the send
got before the client hung up, so the filter is tested on that record."""

from __future__ import annotations

import logging
import sys

from corral_server.rpc.errors import GRPC_SERVER_LOGGER, ClientGone, install_client_gone


def grpc_record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    try:
        raise RuntimeError("Failed execute_batch")
    except RuntimeError:
        exc_info = sys.exc_info()
    return logging.LogRecord(GRPC_SERVER_LOGGER, level, "server.pyx", 1, message, (), exc_info)


def test_a_failed_send_to_a_gone_client_is_demoted_to_info_without_traceback() -> None:
    record = grpc_record("ExecuteBatchError raised in core by servicer method [/corral.v1.X/Y]")
    logger = logging.getLogger(GRPC_SERVER_LOGGER)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        assert ClientGone().filter(record)
    finally:
        logger.setLevel(level)
    assert (record.levelno, record.levelname, record.exc_info) == (logging.INFO, "INFO", None)
    assert record.getMessage() == "client gone before its answer to /corral.v1.X/Y was sent"


def test_a_demoted_record_is_dropped_where_info_is_not_logged() -> None:
    logger = logging.getLogger(GRPC_SERVER_LOGGER)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        assert not ClientGone().filter(grpc_record("ExecuteBatchError raised in core by x [m]"))
    finally:
        logger.setLevel(level)


def test_other_grpc_errors_keep_their_level_and_traceback() -> None:
    record = grpc_record("Unexpected [ValueError] raised by servicer method [/corral.v1.X/Y]")
    assert ClientGone().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None


def test_installing_the_filter_puts_one_on_grpcs_server_logger_however_often_it_runs() -> None:
    install_client_gone()
    install_client_gone()
    filters = logging.getLogger(GRPC_SERVER_LOGGER).filters
    assert sum(isinstance(f, ClientGone) for f in filters) == 1
