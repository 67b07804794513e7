"""The embedded durable store: one SQLite database in the state directory, written by one
group-committing thread, read by another; never touched from the event loop.

Imports nothing: a module that needs only the store's errors or its database (the rpc edge's
error table does) must not load every table's module with them."""
