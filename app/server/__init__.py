"""The hardened uvicorn server: the guarded HTTP protocol, connection caps, eager accept, the
descriptor budget and port files."""
