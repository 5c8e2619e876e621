"""Fetching documents by URL (HTTP, HTTPS, FILE, FTP, Gopher) for the gatherer.

``Fetchers`` (dispatch) picks the fetcher by scheme; every fetcher returns a ``Fetched`` or
raises ``gatherer.errors.FetchError`` with a ``kind``.
"""

from gatherer.fetch.dispatch import Fetcher, Fetchers
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings

__all__ = ["FetchSettings", "Fetched", "Fetcher", "Fetchers", "Validators"]
