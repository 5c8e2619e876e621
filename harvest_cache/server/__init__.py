"""The proxy's drivers: client connections, request handling, CONNECT tunnels, the access log."""
