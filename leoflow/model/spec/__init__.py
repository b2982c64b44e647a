"""The DAG-spec language: what a DAG document may say, how it is checked, and how its templates render.

Pure: no I/O beyond the text handed in, no database, no Kubernetes client. The Kubernetes
object model that a task's pod settings are checked against lives beside it in
:mod:`leoflow.model.k8s` (this package imports that one, never the other way round), and the
leaves both share (bounds, limits, field parsers, cron) sit in :mod:`leoflow.model` itself.
Reading DAG files (YAML, documents, directories, the sync plan) is :mod:`leoflow.model.files`, above.
"""
