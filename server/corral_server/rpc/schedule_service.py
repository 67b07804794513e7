"""corral.v1.ScheduleService: schedules (schedules/), checked and converted at this edge."""

from __future__ import annotations

from corral.v1 import schedule_pb2 as sched_pb
from corral.v1 import schedule_service_pb2 as svc_pb
from corral.v1 import schedule_service_pb2_grpc as svc_grpc
from corral_server import errors
from corral_server.clock import Clock
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds
from corral_server.rpc.errors import Ctx, unary
from corral_server.rpc.schedule_codec import request_from_pb, schedule_to_pb
from corral_server.schedules.scheduler import Scheduler
from corral_server.schedules.validate import build

# A page ends before this many bytes of schedules (ListAgents' rule): one schedule is at most
# about 100 KiB (its prompt, its create request's labels), so a page holds one at least.
MAX_PAGE_BYTES = 3 << 20
MAX_PAGE_SIZE = 1_000


class ScheduleService(svc_grpc.ScheduleServiceServicer):
    def __init__(self, scheduler: Scheduler, manager: AgentManager, clock: Clock) -> None:
        self._scheduler = scheduler
        self._manager = manager
        self._clock = clock

    @unary
    async def CreateSchedule(
        self, request: svc_pb.CreateScheduleRequest, context: Ctx
    ) -> svc_pb.CreateScheduleResponse:
        limits = self._manager.limits
        bounds.check_string(request.agent_id, limits.max_id_chars, "agent_id")
        if request.HasField("create"):
            bounds.check_labels(request.create.labels, limits)
        asked = request_from_pb(request)
        now = self._clock.now_ms()
        schedule = build(asked, self._manager, self._scheduler.new_id(), now)
        added = await self._scheduler.add(schedule)
        return svc_pb.CreateScheduleResponse(schedule=schedule_to_pb(added))

    @unary
    async def ListSchedules(
        self, request: svc_pb.ListSchedulesRequest, context: Ctx
    ) -> svc_pb.ListSchedulesResponse:
        limits = self._manager.limits
        bounds.check_string(request.agent_id, limits.max_id_chars, "agent_id")
        bounds.check_string(request.page_token, limits.max_id_chars, "page_token")
        if request.page_size > MAX_PAGE_SIZE:
            raise errors.InvalidArgument.field("page_size", f"at most {MAX_PAGE_SIZE}")
        schedules = self._scheduler.list(request.agent_id)
        ids: list[str] = [s.id for s in schedules]
        start = 0
        if request.page_token:
            if request.page_token not in ids:
                raise errors.InvalidArgument.field("page_token", "not a token ListSchedules gave")
            start = ids.index(request.page_token) + 1
        page: list[sched_pb.Schedule] = []
        size = 0
        token = ""
        for schedule in schedules[start : start + (request.page_size or 100)]:
            msg = schedule_to_pb(schedule)
            size += msg.ByteSize() + 8
            if page and size > MAX_PAGE_BYTES:
                break
            page.append(msg)
        if page and start + len(page) < len(schedules):
            token = page[-1].id
        return svc_pb.ListSchedulesResponse(schedules=page, next_page_token=token)

    @unary
    async def PauseSchedule(
        self, request: svc_pb.PauseScheduleRequest, context: Ctx
    ) -> svc_pb.PauseScheduleResponse:
        bounds.check_string(request.schedule_id, self._manager.limits.max_id_chars, "schedule_id")
        changed = await self._scheduler.pause(request.schedule_id, request.paused)
        return svc_pb.PauseScheduleResponse(schedule=schedule_to_pb(changed))

    @unary
    async def DeleteSchedule(
        self, request: svc_pb.DeleteScheduleRequest, context: Ctx
    ) -> svc_pb.DeleteScheduleResponse:
        bounds.check_string(request.schedule_id, self._manager.limits.max_id_chars, "schedule_id")
        await self._scheduler.delete(request.schedule_id)
        return svc_pb.DeleteScheduleResponse()
