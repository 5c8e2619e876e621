"""The object store: a memory hot tier over a persistent disk tier."""
