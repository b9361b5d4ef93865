"""The API's routes, one module per resource; produce is served by ASGIOperations."""
