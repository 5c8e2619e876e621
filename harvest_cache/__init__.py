"""Harvest's object cache: an HTTP/1.1 caching forward proxy with a two-tier store."""

__version__ = "0.1.0"

__all__ = ["__version__"]
