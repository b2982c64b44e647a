"""Task instances (``task_instances``): the SQL for them, by what it does to them.

- :mod:`.transitions` — read and moved by the leader's scheduling loop (compare-and-set, batched);
- :mod:`.queueing` — which ready ones get the free slots (pools, priority, limits);
- :mod:`.downstream` — what a final state does to the tasks after it (counters, trigger rules,
  ``upstream_failed``), and failing the ones the scheduler could not handle;
- :mod:`.conditions` — what a ``when:`` reads (the run's conf and facts, the ancestors' outputs);
- :mod:`.reads` — listed and shown by the HTTP API, counted by the metrics.
"""
