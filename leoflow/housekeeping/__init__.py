"""The leader's housekeeping: keeping the database in step with the DAG files, and within bounds.

Leader services next to the scheduler, started by the composition root (:mod:`leoflow.replica`)
when their settings ask for them:

- :mod:`.directory_sync` — syncs ``LEOFLOW_DAGS_DIR`` at startup and whenever its files change
  (reading the directory: :mod:`.dag_directory`, also used by ``leoflow dags sync``);
- :mod:`.retention` — deletes history older than ``LEOFLOW_RETENTION_DAYS``, and audit events
  older than ``LEOFLOW_AUDIT_RETENTION_DAYS``, in small batches, with cutoffs from the database's
  clock (also ``leoflow db purge``).

Layer: like the scheduler, this package builds on ``db``, ``model``, ``settings``, ``metrics``
and ``leadership``, and imports nothing of the scheduler, the executors, the election or the API
(docs/adr/0008-layers.md; tests/test_layers.py).
"""
