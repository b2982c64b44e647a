"""The Kubernetes executor: one pod per task try, named deterministically, adopted on conflict.

- :mod:`.kube_client` — the only door to the Kubernetes API (the official client, in worker threads);
  its failures are the typed errors of :mod:`.errors`;
- :mod:`.pods` — task pods as data: the spec Leoflow creates, the labels it selects by, what a
  pod's status means; :mod:`.pod_render` — the pod body from the spec's pod fields, the
  templates and the restricted defaults, checked before it is sent;
- :mod:`.create` — how a try's pod comes to exist (fenced, batched, retried, adopted on 409);
- :mod:`.placement` — where a try's pod runs: its team's namespace, service account and template;
- :mod:`.executor` — the executor itself: reconcile, one watch per namespace, resync, kill;
- :mod:`.gc` — leader-only garbage collection of finished pods;
- :mod:`.logs` — the log shipper every replica runs;
- :mod:`.live_logs` — running pods' output for every replica's API (a bounded tail).
"""
