"""Where agents work: git worktrees made for them (worktrees.py), their changes as a diff
(changes.py), every git call under a deadline off the event loop (git.py)."""
