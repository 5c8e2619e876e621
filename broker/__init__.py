"""Harvest's Broker: collects SOIF summaries, indexes them and answers queries.

Not built yet: see the open issues."""

__all__: list[str] = []
