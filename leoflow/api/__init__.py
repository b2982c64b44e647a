"""The stateless HTTP API every replica serves (Starlette): routes, auth, metrics, OpenAPI."""
