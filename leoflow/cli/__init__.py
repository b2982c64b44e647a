"""The ``leoflow`` command line: one module per group of verbs, wired up in :mod:`.main`."""
