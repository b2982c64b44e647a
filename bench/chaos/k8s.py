"""The fake Kubernetes API server as the soak runs it: in-process, reachable from the namespaces.

``tests.harness.fake_k8s.FakeKubernetes`` listens on loopback only; the replicas live in their
own network namespaces, so the soak adds one more listener per namespace on the host side of its
veth link, serving the *same* store, kubelet and request log. Each replica gets a kubeconfig
pointing at its own link address.

Flaky tasks: a pod whose command contains :data:`~bench.chaos.workload.FLAKY_MARKER` and whose
``leoflow.io/try`` label is ``1`` has the marker rewritten to ``exit 1`` the moment it is
created (before the kubelet starts it), so try 1 fails and later tries succeed.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from bench.chaos.workload import FLAKY_MARKER
from tests.harness.fake_k8s import FakeApiServer, FakeKubernetes
from tests.harness.netns import NetNamespace

NAMESPACE = "leoflow-chaos"


class ChaosKubernetes:
    """FakeKubernetes plus one listener per network namespace and the flaky-task hook."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.fake = FakeKubernetes(startup_delay=0.02)
        self.fake.store.on_create.append(self._fail_first_try)
        self._extra: list[FakeApiServer] = []
        self.flaky_failures = 0

    def start(self, namespaces: list[NetNamespace]) -> dict[int, dict[str, str]]:
        """Start serving; returns each replica's Kubernetes environment (by namespace index)."""
        self.fake.start()
        env: dict[int, dict[str, str]] = {}
        handler = self.fake.server.RequestHandlerClass
        for i, ns in enumerate(namespaces):
            server = FakeApiServer((ns.host_addr, self.fake.port), handler)  # killed replicas' resets are not errors
            threading.Thread(target=server.serve_forever, name=f"fake-k8s-{ns.name}", daemon=True).start()
            self._extra.append(server)
            path = self.workdir / f"kubeconfig-{i + 1}.json"
            self.fake.write_kubeconfig(path, NAMESPACE)
            path.write_text(path.read_text().replace(self.fake.url, f"http://{ns.host_addr}:{self.fake.port}"))
            env[i] = {"KUBECONFIG": str(path), "LEOFLOW_K8S_NAMESPACE": NAMESPACE}
        return env

    def stop(self) -> None:
        for server in self._extra:
            with contextlib.suppress(OSError):
                server.shutdown()
                server.server_close()
        self.fake.stop()

    def _fail_first_try(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get("leoflow.io/try") != "1":
            return
        containers = pod["spec"].get("containers") or []
        if not any(FLAKY_MARKER in " ".join([*(c.get("command") or []), *(c.get("args") or [])])
                   for c in containers):
            return

        def rewrite(stored: dict[str, Any]) -> bool:
            for c in stored["spec"]["containers"]:
                c["command"] = [part.replace(FLAKY_MARKER, "echo failing try 1 by design; exit 1")
                                for part in c.get("command") or []]
                c["args"] = [part.replace(FLAKY_MARKER, "echo failing try 1 by design; exit 1")
                             for part in c.get("args") or []]
            return True

        if self.fake.store.update(meta["namespace"], meta["name"], meta["uid"], rewrite) is not None:
            self.flaky_failures += 1

    # ------------------------------------------------------------------ evidence
    def requests(self) -> list[dict[str, Any]]:
        with self.fake._lock:
            return [dict(r) for r in self.fake.requests]
