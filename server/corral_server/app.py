"""The daemon assembled: store, hub, manager, gRPC services, health and reflection.

`Daemon` is what `corral serve` runs and what the integration tests start on port 0 with a
temporary state directory and an injected clock. Drain order (SIGTERM): health goes
NOT_SERVING, new work is refused, open streams end with a resume point, then the server
stops within the grace period.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import agent_service_pb2_grpc as agent_svc_grpc
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral_server.clock import Clock, SystemClock
from corral_server.hub import EventHub, new_incarnation
from corral_server.manager.manager import AgentManager
from corral_server.manager.specs import Timeouts
from corral_server.manager.validate import Limits
from corral_server.providers.base import Provider
from corral_server.providers.scripted import ScriptedProvider
from corral_server.rpc.agent_service import AgentService
from corral_server.rpc.convert import encode_event
from corral_server.rpc.event_service import event_service_handler
from corral_server.rpc.malformed import MalformedRequests
from corral_server.rpc.timeline_service import TimelineService
from corral_server.rpc.turn_service import TurnService
from corral_server.timeline.memory import InMemoryTimelineStore

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    agent_svc_pb.DESCRIPTOR.services_by_name["AgentService"].full_name,
    turn_pb.DESCRIPTOR.services_by_name["TurnService"].full_name,
    tl_pb.DESCRIPTOR.services_by_name["TimelineService"].full_name,
    event_pb.DESCRIPTOR.services_by_name["EventService"].full_name,
)


@dataclass(frozen=True, slots=True)
class Config:
    listen: str = "127.0.0.1:50051"
    state_dir: Path | None = None
    max_request_bytes: int = 8 * 1024 * 1024
    limits: Limits = field(default_factory=Limits)
    timeouts: Timeouts = field(default_factory=Timeouts)
    retain_events: int = 100_000
    # Rows kept per agent timeline (None = all); older rows answer AFTER with `gap`.
    timeline_retain_rows: int | None = None
    subscriber_buffer_events: int = 8_192
    extra_providers: Mapping[str, Provider] = field(default_factory=dict)


class Daemon:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        # The event log. It lives in memory today, so each start creates a new one with a new
        # incarnation; the durability issue loads both from the state directory here.
        self.hub = EventHub(
            encode_event,
            incarnation=new_incarnation(),
            retain_events=config.retain_events,
            buffer_events=config.subscriber_buffer_events,
        )
        providers: dict[str, Provider] = {"scripted": ScriptedProvider(self.clock)}
        providers.update(config.extra_providers)
        self.timeline = InMemoryTimelineStore(retain_rows=config.timeline_retain_rows)
        self.manager = AgentManager(
            providers=providers,
            timeline=self.timeline,
            publisher=self.hub,
            clock=self.clock,
            limits=config.limits,
            timeouts=config.timeouts,
        )
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the bound port. Raises OSError when the port is taken."""
        size = self.config.max_request_bytes
        server = grpc.aio.server(
            interceptors=[MalformedRequests()],
            options=[
                # A second daemon on the same port must fail to bind, not share the port.
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ],
        )
        agent_svc_grpc.add_AgentServiceServicer_to_server(AgentService(self.manager), server)
        turn_grpc.add_TurnServiceServicer_to_server(TurnService(self.manager), server)
        tl_grpc.add_TimelineServiceServicer_to_server(TimelineService(self.manager), server)
        server.add_generic_rpc_handlers((event_service_handler(self.hub, self.manager.snapshot),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            self.port = server.add_insecure_port(self.config.listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.config.listen}: {exc}") from exc
        if self.port == 0:
            raise OSError(f"cannot listen on {self.config.listen}: address in use or invalid")
        await server.start()
        self._server = server
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("corral serving on %s (port %d)", self.config.listen, self.port)
        return self.port

    async def drain(self, grace_s: float = 10.0) -> None:
        """Health NOT_SERVING, refuse new work, end streams with a resume point, stop."""
        await self._health.enter_graceful_shutdown()
        self.hub.end_all("server draining")
        await self.manager.shutdown()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
