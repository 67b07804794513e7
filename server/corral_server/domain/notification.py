"""Whom an agent's attention notifies (docs/design.md#attention): the plan that travels on the
attention_required event. The policy that makes it is manager/presence.py."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class NotifyKind(enum.Enum):
    NOBODY = "nobody"
    IN_APP = "in_app"
    PUSH = "push"


@dataclass(frozen=True, slots=True)
class NotificationPlan:
    kind: NotifyKind
    client_id: str = ""  # IN_APP: the client to tell


NOBODY = NotificationPlan(NotifyKind.NOBODY)
