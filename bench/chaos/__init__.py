"""Helpers of the chaos soak (``bench/chaos.py``): cluster, workload, faults, checks, timeline.

The soak is evidence, not a unit test: it starts real processes (PostgreSQL, ``leoflow serve``
replicas in their own network namespaces, the fake Kubernetes API server), hurts them at random,
and afterwards proves from the fake server's request log and the database that every task try
ran exactly once and no stale leader acted.
"""
