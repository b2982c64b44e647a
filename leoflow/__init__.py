"""Leoflow: a small, rock-solid workflow scheduler for Kubernetes, backed by PostgreSQL.

The package tree mirrors the architecture:

- ``election``  — who leads: the advisory-lock elector, fencing terms, membership.
- ``scheduler`` — what the leader does: DAG specs, runs, the task state machine.
- ``executor``  — where tasks run: Kubernetes pods, local subprocesses, in-memory (tests).
- ``api``       — the stateless HTTP API every replica serves.
- ``db``        — models, engine, migrations and every SQL statement.
- ``metrics``   — Prometheus metric definitions.
- ``cli``       — the ``leoflow`` command.
- ``standalone``— one process with an embedded PostgreSQL, for laptops.
"""

__version__ = "0.1.0"
