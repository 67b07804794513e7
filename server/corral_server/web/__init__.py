"""The web edge: corral.v1 over HTTP/1.1 for browsers (the Connect protocol and gRPC-Web) and
the dashboard's static files, on `--web-listen`.

The calls run on the very servicer objects the gRPC server uses (`methods.py` adapts them);
this package only frames, decodes and encodes. Nothing here is imported by a daemon that does
not serve the web port (uvicorn and the ASGI stack load with `endpoint.py`).
"""
