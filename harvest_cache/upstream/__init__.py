"""The way out: pooled keep-alive connections (origins resolved by harvest_common.dns) and the
HTTP/1.1 client."""
