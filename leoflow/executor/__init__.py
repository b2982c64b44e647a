"""Where tasks run: one interface (:mod:`.base`), Kubernetes / local / in-memory implementations."""
