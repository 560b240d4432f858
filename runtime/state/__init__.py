"""State backends: keyed state (``keyed_backend``, with TTL ``keyed_ttl``), operator state
(``operator_backend``), and TTL."""
