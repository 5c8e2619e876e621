"""The way out: origin DNS, pooled keep-alive connections and the HTTP/1.1 client."""
