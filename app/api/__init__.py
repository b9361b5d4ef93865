"""The HTTP API: the FastAPI app, its routes, schemas, errors, auth, metrics and OpenAPI spec."""
