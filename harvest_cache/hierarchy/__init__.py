"""The parent/sibling hierarchy: ICP (RFC 2186, 2187) and the choice of a peer."""
