"""Log output for `corral serve`: readable lines (the default) or JSON lines (`--log-format
json`, one object per record: time, level, logger, message, and the exception when there is
one), for log collectors."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# Loggers of libraries the daemon serves with (uvicorn, the MCP SDK).
QUIET_LIBRARIES = ("uvicorn", "mcp")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # The web and MCP servers' own start and stop chatter ("Started server process", "session
    # manager started") says nothing the start-up line does not: their warnings and errors only,
    # unless debugging.
    if logging.getLevelName(level) != logging.DEBUG:
        for library in QUIET_LIBRARIES:
            logging.getLogger(library).setLevel(logging.WARNING)
