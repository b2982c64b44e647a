"""Standalone mode: the whole of Leoflow in one process on one machine.

``leoflow standalone`` composes parts that also run in a cluster: an embedded PostgreSQL
(:mod:`leoflow.standalone.postgres`) with its data under ``LEOFLOW_HOME``, one instance per home
(:mod:`leoflow.standalone.instance`), a generated admin token (:mod:`leoflow.standalone.token`),
the optional sample DAG (:mod:`leoflow.standalone.example`) and the ordinary replica runtime of
``leoflow serve`` with the local executor (:mod:`leoflow.standalone.runtime`).
"""
