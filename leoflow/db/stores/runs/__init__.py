"""Runs (``dag_runs``): the SQL for them, by what it does to them.

- :mod:`.lifecycle` — triggered and cancelled by users, made due and started by the leader;
- :mod:`.endings` — finished when their task instances are all final, or failed for good;
- :mod:`.exits` — the exit tasks (``on_exit``) created when the body ends, cancelled when it runs again;
- :mod:`.reads` — listed and shown by the HTTP API, counted by the metrics.
"""
