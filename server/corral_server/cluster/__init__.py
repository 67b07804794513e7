"""The cluster's shared state on NATS JetStream: the replicated event log (log.py) and the
agents' ownership leases (leases.py), the node directory and CreateAgent's placement
(nodes.py). The only package that imports nats; nothing is wired into
the daemon yet (docs/cluster.md says what exists and what comes next)."""
