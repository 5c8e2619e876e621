"""Intercepting CONNECT tunnels: the CA, the certificates it mints, what to bump."""
