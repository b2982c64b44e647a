"""The client of Leoflow's HTTP API, apart from the server: what the CLI's client verbs speak through.

It imports nothing of the server side (only :mod:`leoflow.errors`), so a verb that asks a
replica something loads a few small modules, not the scheduler, the database driver or the
Kubernetes client; an import-linter contract keeps it so.
"""
