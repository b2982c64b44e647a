"""DAG files: YAML read within budgets, documents split with their line:column, a directory's DAGs, the sync plan.

Above :mod:`leoflow.model.spec` (a file's documents become specs through it), never below it:
the spec language knows nothing of files, so a spec built in memory (an API body, a test) and
one read from a file are checked by the same code. An import-linter contract keeps the order
``files`` → ``spec`` → ``k8s``.
"""
