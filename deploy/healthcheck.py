"""Container health check: exit 0 when corral's grpc.health.v1 Check answers SERVING.

    python /opt/corral/healthcheck.py [HOST:PORT]   (default 127.0.0.1:50051)

Health needs no token, so this works with --auth-token-file too. During the drain after
SIGTERM the daemon answers NOT_SERVING, and this exits 1.
"""

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
try:
    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=2.0
        )
except grpc.RpcError as exc:
    print(f"corral health: {exc.code().name}", file=sys.stderr)
    sys.exit(1)
status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
print(f"corral health: {status}")
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1)
