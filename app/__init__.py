"""twinlog's broker process: the HTTP API (`app/api`), the hardened uvicorn server (`app/server`),
the `Broker` and its non-HTTP services (`app/broker`), the `twinlog` command (`app/cli`), and the
settings. `app.api.main.create_app` builds the app."""
