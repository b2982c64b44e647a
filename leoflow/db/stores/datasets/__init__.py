"""Datasets' SQL: who produces and consumes a URI (``references``), events and the coalescing queue
(``events``), the leader's dataset-triggered runs (``triggers``) and the API's views (``reads``)."""
