"""Changing a running session's model or mode (docs/design.md#live-config): an optional
capability of a provider session, asked for by UpdateAgent and by a reloaded providers file.

A session that can apply a change implements `LiveSettings`; one that cannot, or cannot now,
raises `FailedPrecondition` with the reason. `live_settings_of` is the one place that asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from corral_server.errors import FailedPrecondition


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """What to change (None: keep it)."""

    model: str | None = None
    mode: str | None = None

    def __bool__(self) -> bool:
        return self.model is not None or self.mode is not None

    def describe(self) -> str:
        return " and ".join(
            f"{what} {value!r}"
            for what, value in (("model", self.model), ("mode", self.mode))
            if value is not None
        )


@runtime_checkable
class LiveSettings(Protocol):
    async def change_settings(self, change: SettingsChange) -> None:
        """Apply `change` to the running session, for this turn and the next (a provider
        that takes settings per turn keeps them for its next turn). Raise FailedPrecondition
        with the provider's reason when it cannot. What the provider then reports goes to the
        sink as `ProviderSettings`, before this returns where the provider says so at once."""
        ...


class SettingsRefused(FailedPrecondition):
    """The provider cannot change the session's settings live; the message says why."""

    reason = "SETTINGS_NOT_LIVE"


def live_settings_of(session: object) -> LiveSettings | None:
    return session if isinstance(session, LiveSettings) else None
