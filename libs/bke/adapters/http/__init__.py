"""What every service serves over HTTP beside its bus handlers: /healthz, /readyz,
/metrics and its dashboard. `server` runs the ASGI app inside the service's event loop;
`metrics` holds the per-service Prometheus registry; `app` assembles the routes."""
