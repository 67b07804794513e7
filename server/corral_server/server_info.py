"""What a daemon says about itself (ServerService.GetServerInfo): its version, the API it
serves, its event log's position, the limits a client must respect, its providers and optional
features, and its serving state. A running daemon and a waiting standby both describe
themselves from their Config (config.py builds these values from it); only the running one has
an event log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from importlib import metadata

# The protobuf package served. Within it the contract only grows (buf breaking guards it).
API_VERSION = "corral.v1"


def corral_version() -> str:
    """The installed release (pyproject's version), as `corral --version` reports it."""
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


class ServingState(enum.Enum):
    SERVING = "serving"
    DRAINING = "draining"
    STANDBY = "standby"


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_request_bytes: int
    max_prompt_chars: int
    max_prompt_bytes: int
    max_content_parts: int
    max_ids_per_request: int
    max_id_chars: int
    max_labels: int
    max_streams_per_connection: int


@dataclass(frozen=True, slots=True)
class ServerFeatures:
    tokens: bool = False
    tls: bool = False
    mutual_tls: bool = False
    reflection: bool = False
    web_url: str = ""  # "" = no web port
    mcp: bool = False
    metrics_url: str = ""  # "" = no metrics
    standby: bool = False


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: str
    state: ServingState
    limits: ServerLimits
    providers: tuple[str, ...]
    features: ServerFeatures
    # The event log's; "" and 0 on a standby (it never opens the log).
    incarnation: str = ""
    head_revision: int = 0
    api_version: str = API_VERSION
