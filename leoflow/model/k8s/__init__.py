"""The Kubernetes object model: pod shapes, names and strategic merges, checked offline.

Pure: it never talks to a cluster (the client lives in :mod:`leoflow.executor.kubernetes`). It
imports only the shared leaves of :mod:`leoflow.model`, never the DAG-spec language of
:mod:`leoflow.model.spec`, so a pod can be checked without a DAG around it.
"""
