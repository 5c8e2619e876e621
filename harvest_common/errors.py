"""The typed errors of the shared modules; each service catches them where it calls those.

::

    ConfigError            bad configuration; carries every problem found (the configuration
                           kit raises it; the cache reports it as its own, the other services
                           map it to theirs)

Third-party exceptions (tomllib, OSError) are mapped to these where the shared modules call
them; nothing matches on exception text.
"""

from __future__ import annotations


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists each bad key with the reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))
