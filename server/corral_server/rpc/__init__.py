"""The gRPC edge: the only package of the server that imports grpc and generated protobuf."""
