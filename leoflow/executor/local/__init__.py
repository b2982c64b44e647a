"""The local executor (standalone mode): each task try is a subprocess of the leader.

- :mod:`.executor` — the executor itself: claim under the fence, spawn, time out, cancel, adopt
  what a previous executor left running, store the output;
- :mod:`.process` — one try's process and its files on this host (``LEOFLOW_HOME/tasks/<try>/``):
  the environment it gets, how it is spawned, signalled and settled from ``exit.json``;
- :mod:`.outcomes` — the reporter every replica runs: tries this host ran while it was not the
  leader are settled from their files and reported through the database.
"""
