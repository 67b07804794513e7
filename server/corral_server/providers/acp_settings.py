"""A running ACP session's mode and model (docs/design.md#live-config): what `session/new`
(or `session/load`) said the agent offers, and the requests that change them.

ACP v1 has `session/set_mode` for an agent that answered with `modes`; `session/set_model` is
unstable (not in the schema corral pins), so it is sent only to an agent whose answer listed
`models`. Anything else is refused with the reason, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server.domain.timeline import JsonValue
from corral_server.providers.connection import ConnectionLost, RequestFailed
from corral_server.providers.jsonrpc import JsonRpc
from corral_server.providers.live import SettingsChange, SettingsRefused


@dataclass(slots=True)
class AcpSettings:
    modes: tuple[str, ...] = ()
    models: tuple[str, ...] = ()

    def note(self, answer: JsonValue) -> None:
        """Keep what a `session/new` or `session/load` answer offers."""
        if not isinstance(answer, dict):
            return
        self.modes = _ids(answer.get("modes"), "availableModes", "id")
        self.models = _ids(answer.get("models"), "availableModels", "modelId")

    async def change(self, rpc: JsonRpc, session_id: str, change: SettingsChange) -> None:
        requests: list[tuple[str, dict[str, JsonValue]]] = []
        if change.mode is not None:
            if change.mode not in self.modes:
                raise SettingsRefused(_refusal("mode", change.mode, self.modes))
            requests.append(("session/set_mode", {"sessionId": session_id, "modeId": change.mode}))
        if change.model is not None:
            if change.model not in self.models:
                raise SettingsRefused(_refusal("model", change.model, self.models))
            params: dict[str, JsonValue] = {"sessionId": session_id, "modelId": change.model}
            requests.append(("session/set_model", params))
        try:
            for method, params in requests:
                await rpc.request(method, params)
        except (RequestFailed, ConnectionLost) as exc:
            raise SettingsRefused(
                f"the agent did not change the {change.describe()}: {exc}"
            ) from None


def _ids(state: JsonValue, key: str, id_key: str) -> tuple[str, ...]:
    listed = state.get(key) if isinstance(state, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple(
        str(entry[id_key]) for entry in listed if isinstance(entry, dict) and id_key in entry
    )


def _refusal(what: str, value: str, offered: tuple[str, ...]) -> str:
    if not offered:
        return f"this ACP agent offers no {what}s to change a running session to"
    return f"this ACP agent's session offers no {what} {value!r} (it offers {', '.join(offered)})"
