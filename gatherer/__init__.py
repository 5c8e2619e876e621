"""Harvest's Gatherer: crawls providers through the cache, summarizes documents with Essence
into SOIF records and serves them to brokers (docs/gatherer.md).

``gatherer.runner.gather`` runs one gathering pass; ``harvest-gather`` is its command line."""

__all__: list[str] = []
