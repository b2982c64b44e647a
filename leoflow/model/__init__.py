"""The domain: pure types and pure functions, no I/O.

What a DAG is (:mod:`.spec` and its field validators :mod:`.fields`), its compiled graph
(:mod:`.graph`), when it is due (:mod:`.timetable`), the states of runs, task instances and
tries (:mod:`.states`), what identifies a try and what executors report about it
(:mod:`.tries`), what a try learns about its run (:mod:`.run_context`), how runs are named
(:mod:`.run_ids`) and the election's advisory-lock key (:mod:`.lock_key`).

This package is the bottom layer (docs/adr/0008-layers.md): it imports nothing from the rest
of Leoflow except :mod:`leoflow.errors`, so the data layer, the scheduler, the executors and
the API can all speak these types without importing each other.
"""
