"""What the Harvest services share, and the only package they import besides their own: the
configuration kit, task ownership and lifecycle, SQLite helpers, SOIF and its stream
transport, the replication protocol's types, the DNS resolver and the HSR registration client.
It imports none of the services."""

__all__: list[str] = []
