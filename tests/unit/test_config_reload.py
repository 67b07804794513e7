"""The two signatures of a provider entry (config_reload.py): what its process starts with,
whose change makes a new provider, and the model and mode defaults, changed in place."""

from __future__ import annotations

from corral_server.clock import FakeClock
from corral_server.config_reload import changes_between
from corral_server.manager.specs import Defaults
from corral_server.providers import registry
from corral_server.providers.config import ProviderEntry

OLD = (
    ProviderEntry("a", "acp", ("agent",), env={"K": "1"}),
    ProviderEntry("b", "acp", ("agent",), model="m1"),
    ProviderEntry("gone", "scripted"),
    ProviderEntry("same", "codex", ("codex",), codex_config=(("model", '"o3"'),)),
)


def test_a_changed_process_makes_a_new_provider_and_a_changed_default_does_not() -> None:
    new = (
        ProviderEntry("a", "acp", ("agent",), env={"K": "2"}),
        ProviderEntry("b", "acp", ("agent",), model="m2", mode="plan"),
        ProviderEntry("same", "codex", ("codex",), codex_config=(("model", '"o3"'),)),
        ProviderEntry("fresh", "scripted", steer=True),
    )
    built = registry.build(new, FakeClock(), environ={})
    changes, removed = changes_between(OLD, new, built)
    assert set(changes) == {"a", "b", "fresh"} and removed == ("gone",)
    assert changes["a"].provider is built["a"]
    assert changes["a"].before == changes["a"].after == Defaults()
    assert changes["b"].provider is None  # in place: the same processes go on
    assert (changes["b"].before, changes["b"].after) == (Defaults("m1"), Defaults("m2", "plan"))
    assert changes["fresh"].provider is built["fresh"]


def test_the_same_entries_change_nothing() -> None:
    built = registry.build(OLD, FakeClock(), environ={})
    assert changes_between(OLD, OLD, built) == ({}, ())
