"""twinlog's HTTP face: the FastAPI app, routes, schemas, error mapping, settings, the Broker
wiring and the `twinlog` CLI. `app.api.main.create_app` builds the app."""
