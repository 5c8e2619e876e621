"""The object store: a memory hot tier over a persistent disk tier."""

from harvest_cache.store.tiered import TieredStore, TieredWriter, open_store

__all__ = ["TieredStore", "TieredWriter", "open_store"]
