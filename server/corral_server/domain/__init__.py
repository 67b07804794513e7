"""Plain, typed domain values: agents, timelines, events. No protobuf, no grpc, no I/O."""
