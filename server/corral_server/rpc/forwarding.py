"""Any node serves any client: a call that changes an agent another node owns is forwarded to
that node, transparently (docs/cluster.md#forwarding). The gRPC edge does it with the
`ForwardCalls` interceptor, after the token check (the receiving node authenticates first,
the owner again); the web edge serves the same wrapped behaviour (`forwarding_servicers`).

Which calls: every corral.v1 method whose request has a top-level `agent_id` and that is
not a read (rpc/roles.py's read set) or is a read only the owner can answer (`OWNER_READS`),
derived from the service descriptors, so a new changing method is forwarded without a list to
keep; and CreateAgent when a placement is given (the node its `corral.node` label names, or
the least loaded). Other reads are answered here, from this node's own view.

Where: the injected `owner_of(agent_id)` names the owner (None: here). A forwarded call
carries `corral-forwarded-from`; a node never forwards such a call again: if it does not own
the agent either, the answer is UNAVAILABLE / `OWNER_MOVED` naming the node it believes owns
it, and the client retries. A servicer that finds the agent owned elsewhere after the look-up
(UNAVAILABLE / `AGENT_OWNED_ELSEWHERE`, metadata `node`: the ownership moved in between) has
its call forwarded there, once.

Must not: forward a read this node can answer, forward a forwarded call, or decode anything
the owner answers into another shape (answers and statuses pass unchanged:
rpc/forward_relay.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf.message_factory import GetMessageClass

from corral_server import errors
from corral_server.rpc import forward_relay as relay
from corral_server.rpc.errors import abort as abort_with
from corral_server.rpc.forward_relay import FORWARDED_FROM, OWNED_ELSEWHERE, Forwarding, Relay
from corral_server.rpc.roles import READ_METHODS
from corral_server.rpc.server import SERVICE_NAMES, service_descriptor
from corral_server.rpc.wrapping import HandlerWrapper

__all__ = ["ForwardCalls", "Forwarder", "Forwarding", "forwarded_methods", "forwarding_servicers"]

CREATE_AGENT = "/corral.v1.AgentService/CreateAgent"
RELOAD_AGENT = "/corral.v1.AgentService/ReloadAgent"
# Reads only the owner can answer: the working tree and the tool outputs are on its machine,
# and schedules fire there.
OWNER_READS = frozenset(
    {
        "/corral.v1.WorkspaceService/GetChanges",
        "/corral.v1.TimelineService/FetchToolOutput",
        "/corral.v1.ScheduleService/ListSchedules",
    }
)


@dataclass(frozen=True)
class Forwarded:
    """A method calls of which may go to another node."""

    path: str  # /corral.v1.Service/Method
    streaming: bool  # server-streaming
    response: Any  # the response message class


def forwarded_methods() -> dict[str, Forwarded]:
    """Every corral.v1 method that changes one agent named by a top-level `agent_id`, and
    CreateAgent (forwarded only with a placement)."""
    methods: dict[str, Forwarded] = {}
    for full_name in SERVICE_NAMES:
        service = service_descriptor(full_name.rpartition(".")[2])
        for method in service.methods:
            path = f"/{full_name}/{method.name}"
            names = method.input_type.fields_by_name
            local = path in READ_METHODS and path not in OWNER_READS
            by_agent = "agent_id" in names and not local
            if method.client_streaming or not (by_agent or path == CREATE_AGENT):
                continue
            response = GetMessageClass(method.output_type)
            methods[path] = Forwarded(path, method.server_streaming, response)
    return methods


def came_from(context: Any) -> str:
    """The node that forwarded this call ("" for a client's own call)."""
    for key, value in context.invocation_metadata() or ():
        if key == FORWARDED_FROM:
            return str(value)
    return ""


class _OwnedElsewhere(grpc.aio.AbortError):
    """A servicer answered AGENT_OWNED_ELSEWHERE: raised to the forwarding wrapper instead
    of sent, so the call can go to that node."""

    def __init__(self, node: str, status: tuple[Any, str, Any]) -> None:
        super().__init__(node)
        self.node = node
        self.status = status  # the servicer's answer: (code, details, trailing metadata)


class _Watched:
    """The call's context as a servicer sees it, but for an owned-elsewhere answer."""

    def __init__(self, context: Any, here: str) -> None:
        self._context = context
        self._here = here

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> NoReturn:
        info = relay.error_info(trailing_metadata)
        if info is not None and info.reason == OWNED_ELSEWHERE:
            node = info.metadata.get("node", "")
            if node and node != self._here:
                raise _OwnedElsewhere(node, (code, details, trailing_metadata))
        await self._context.abort(code, details, trailing_metadata)
        raise AssertionError("unreachable: abort raises")


class Forwarder:
    """The forwarding of one node: what goes where (`destination`), and the relay."""

    def __init__(self, forwarding: Forwarding) -> None:
        self.forwarding = forwarding
        self.methods = forwarded_methods()
        self.relay = Relay(forwarding)

    async def destination(self, path: str, request: Any, context: Any) -> str | None:
        """The node the call goes to (None: answered here). A forwarded call is answered
        here, or refused with OWNER_MOVED when another node owns the agent."""
        forwarding, source = self.forwarding, came_from(context)
        if path == CREATE_AGENT:
            if forwarding.place is None or source:
                return None  # a forwarded create was placed by the node that sent it
            try:
                node = forwarding.place(dict(request.labels))
            except errors.CorralError as error:
                await abort_with(context, error)
        elif path == RELOAD_AGENT and _reload_target(request) == forwarding.node:
            return None  # the node asked to restart the agent takes it (cluster/relocation.py)
        else:
            node = forwarding.owner_of(request.agent_id) if request.agent_id else None
        if node is None or node == forwarding.node:
            return None
        if source:
            await self.moved(context, request, node)
        return node

    async def moved(self, context: Any, request: Any, node: str) -> NoReturn:
        agent_id = getattr(request, "agent_id", "")
        status = relay.unavailable(
            relay.OWNER_MOVED,
            f"node {self.forwarding.node} does not own agent {agent_id} (node {node} does, "
            f"as far as it knows) and does not forward a forwarded call again; retry",
            {"node": node, "agent_id": agent_id},
        )
        await relay.abort(context, status)

    async def retarget(self, context: Any, request: Any, elsewhere: _OwnedElsewhere) -> str:
        """The node to forward to after the servicer found the agent owned there; a call
        forwarded already is answered OWNER_MOVED instead."""
        if came_from(context) and _reload_target(request) != elsewhere.node:
            await self.moved(context, request, elsewhere.node)
        return elsewhere.node  # a ReloadAgent handed to the node it names: relayed there

    def wrap(self, path: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """`behaviour` (a servicer method: request, context) with its calls forwarded."""
        method = self.methods[path]
        if method.streaming:
            return self._streaming(method, behaviour)
        return self._unary(method, behaviour)

    def _unary(self, method: Forwarded, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def unary(request: Any, context: Any) -> Any:
            node = await self.destination(method.path, request, context)
            if node is None:
                try:
                    return await behaviour(request, _Watched(context, self.forwarding.node))
                except _OwnedElsewhere as elsewhere:
                    node = await self.retarget(context, request, elsewhere)
            return await self.relay.unary(method.path, method.response, request, context, node)

        return unary

    def _streaming(self, method: Forwarded, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            node = await self.destination(method.path, request, context)
            if node is None:
                sent = False
                try:
                    async for message in behaviour(
                        request, _Watched(context, self.forwarding.node)
                    ):
                        sent = True
                        yield message
                    return
                except _OwnedElsewhere as elsewhere:
                    if sent:  # forwarding now would repeat what went out: answer as it said
                        await context.abort(*elsewhere.status)
                    node = await self.retarget(context, request, elsewhere)
            async for message in self.relay.stream(
                method.path, method.response, request, context, node
            ):
                yield message

        return streaming


def _reload_target(request: Any) -> str:
    """The node a ReloadAgent names ("" for another call): that node answers it itself, so a
    hand-over relayed there never goes further."""
    node = getattr(request, "node", "")
    return node if isinstance(node, str) and request.DESCRIPTOR.name == "ReloadAgentRequest" else ""


class ForwardCalls(HandlerWrapper):
    """The interceptor: goes after the token check, so only calls let in are forwarded."""

    def __init__(self, forwarder: Forwarder) -> None:
        super().__init__()
        self.forwarder = forwarder

    def wrap(self, method: str, handler: Any) -> Any:
        if method not in self.forwarder.methods:
            return handler
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self.forwarder.wrap(method, handler.unary_unary))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=self.forwarder.wrap(method, handler.unary_stream))
        return handler


class _ForwardingServicer:
    """A servicer whose forwarded methods are wrapped (what the web edge's table binds)."""

    def __init__(self, servicer: Any, wrapped: Mapping[str, Callable[..., Any]]) -> None:
        self._servicer = servicer
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        wrapped = self._wrapped.get(name)
        return wrapped if wrapped is not None else getattr(self._servicer, name)


def forwarding_servicers(servicers: Mapping[str, Any], forwarder: Forwarder) -> dict[str, Any]:
    """The servicers (by service name) with the forwarded methods' calls forwarded: the web
    edge calls servicers directly, without the gRPC interceptors."""
    served: dict[str, Any] = {}
    for name, servicer in servicers.items():
        prefix = f"/corral.v1.{name}/"
        wrapped = {
            path.removeprefix(prefix): forwarder.wrap(
                path, getattr(servicer, path.removeprefix(prefix))
            )
            for path in forwarder.methods
            if path.startswith(prefix)
        }
        served[name] = _ForwardingServicer(servicer, wrapped) if wrapped else servicer
    return served
