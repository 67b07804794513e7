"""Providers: the agents corral runs. Each speaks to the manager through `base.ProviderSession`."""
