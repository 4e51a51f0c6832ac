"""`queuecore dashboard`: a web UI over one queue (the `dashboard` extra).

`queuecore.dashboard.app.create_app(queue)` is the ASGI application; this package's own
import needs nothing beyond the core, so the command line loads without the extra."""
