"""The operators behind the API: one module per API module it runs (``datastream``, ``connected``,
``windowing``)."""
