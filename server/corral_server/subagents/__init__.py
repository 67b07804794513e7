"""Sub-agent trees (docs/design.md#subagents): run records, their limits, queries, the announce
outbox, and the registry that is their single writer.

Imports nothing: `registry.py` needs the manager, and a module that only needs a run's
protocols or limits must not load it (tests/unit/test_imports.py pins this)."""
