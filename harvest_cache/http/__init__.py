"""Pure HTTP: header fields, Cache-Control, freshness, validation, Vary and the cache policy.

Nothing here imports asyncio or does I/O; time is always an argument.
"""
