"""Schedules: prompts the daemon sends on its own, on a cron expression or an interval, to an
agent or to a new agent (scheduler.py), kept in the database (store.py), on the daemon's
clock (timing.py)."""
