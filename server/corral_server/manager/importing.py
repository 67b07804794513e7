"""ImportAgent's checks (docs/design.md#lifecycle): which provider imports, and whether the request
can be imported at all, decided before anything is started or stored.

The import itself is `AgentManager.import_agent`: the provider reads the session's
conversation (`HistoryImporter`), then the agent is created as CreateAgent creates one, its
provider_session_id set (its first turn resumes that session), and the conversation is stored
by its actor as silent history rows under the new timeline's fresh epoch (`prime`).
"""

from __future__ import annotations

from collections.abc import Mapping

from corral_server import errors
from corral_server.manager.validate import Limits, check_cwd, check_id
from corral_server.providers.base import HistoryImporter, Provider, importer_of


def check_import(
    providers: Mapping[str, Provider],
    provider_name: str,
    provider_session_id: str,
    cwd: str,
    limits: Limits,
) -> tuple[Provider, HistoryImporter]:
    """The provider and its import capability. Bad input is INVALID_ARGUMENT (an unknown
    provider too, naming the known ones); a provider that cannot run or cannot import is
    FAILED_PRECONDITION with the reason."""
    names = ", ".join(sorted(providers))
    if not provider_name:
        raise errors.InvalidArgument.field("provider", f"required; one of {names}")
    check_id("provider", provider_name, limits)
    if not provider_session_id:
        raise errors.InvalidArgument.field(
            "provider_session_id", "required: the provider's id of the session to import"
        )
    check_id("provider_session_id", provider_session_id, limits)
    check_cwd(cwd)
    provider = providers.get(provider_name)
    if provider is None:
        raise errors.UnknownProvider(provider_name, tuple(sorted(providers)))
    info = provider.info()
    if not info.available:
        raise errors.ProviderUnavailable(info.name, info.unavailable_reason)
    importer = importer_of(provider)
    if importer is None:
        raise errors.ImportUnsupported(info.name, info.kind)
    return provider, importer
