"""Task artifacts: files and directories a task hands to later tasks through object storage.

:mod:`.declared` is the spec's ``artifacts:`` field (names, paths, ``from:`` references) and its
checks at apply; :mod:`.objects` says how an artifact becomes one object (its name, the tar
format, the bounds) — both pure. Moving the bytes is :mod:`leoflow.storage.artifacts`; the index is
``db/stores/artifacts``.
"""
