"""The broker's JSON, admin and status API, and the web application that serves it with the
search page, the bulk export, the HSR and the replica routes (routes)."""

from broker.api.routes import make_app

__all__ = ["make_app"]
