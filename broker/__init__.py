"""Harvest's Broker: collects SOIF summaries from gatherers and other brokers into a registry,
indexes them and answers attribute queries (docs/broker.md).

``broker.app.Broker`` is a running broker; ``harvest-broker`` its command line."""

__all__: list[str] = []
