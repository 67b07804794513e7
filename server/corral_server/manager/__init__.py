"""The agent manager: the single writer of every agent's state and timeline."""
