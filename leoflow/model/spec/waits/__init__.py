"""What a task waits for before it runs: ``wait_for:`` conditions and ``depends_on_past`` (the spec side).

The scheduler evaluates them itself (:mod:`leoflow.scheduler.waits`); this package only parses,
bounds and writes them in canonical form.
"""
