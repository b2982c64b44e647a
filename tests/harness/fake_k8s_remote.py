"""Run the fake Kubernetes API server as a separate process and drive it over ``/_fake/*``.

For tests whose replicas are real OS processes (election, chaos): the server must outlive any
one replica and must not share their GIL.

    with FakeKubernetesProcess(tmp_path / "kubeconfig", namespace="tasks") as k8s:
        env = {"KUBECONFIG": str(k8s.kubeconfig)}
        k8s.inject(Fault("create", code=500, times=2))
        ...
        assert len(k8s.creates(code=201)) == 3
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.harness.fake_k8s import Fault

ROOT = Path(__file__).resolve().parents[2]


class FakeKubernetesProcess:
    """``python -m tests.harness.fake_k8s`` in a child process, plus its control client."""

    def __init__(self, kubeconfig: Path, *, namespace: str = "default", port: int = 0,
                 startup_delay: float = 0.02, time_scale: float = 1.0) -> None:
        self.kubeconfig = kubeconfig
        self._args = [sys.executable, "-m", "tests.harness.fake_k8s", "--port", str(port),
                      "--kubeconfig", str(kubeconfig), "--namespace", namespace,
                      "--startup-delay", str(startup_delay), "--time-scale", str(time_scale)]
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> FakeKubernetesProcess:
        self.proc = subprocess.Popen(self._args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"fake Kubernetes API server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> FakeKubernetesProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------ control

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def inject(self, fault: Fault) -> None:
        self._call("POST", "/_fake/faults", dataclasses.asdict(fault))

    def clear_faults(self) -> None:
        self._call("DELETE", "/_fake/faults")

    def requests(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/_fake/requests")["requests"])

    def creates(self, *, code: int | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests() if r["verb"] == "create" and (code is None or r["code"] == code)]

    def pods(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/_fake/pods")["items"])

    def drop_watches(self) -> None:
        self._call("POST", "/_fake/drop-watches", {})

    def compact(self) -> None:
        self._call("POST", "/_fake/compact", {})

    def pause_kubelet(self, paused: bool = True) -> None:
        self._call("POST", "/_fake/kubelet", {"paused": paused})

    def objects(self, *, secrets: dict[str, dict[str, str]] | None = None,
                config_maps: dict[str, dict[str, str]] | None = None, pvcs: list[str] | None = None,
                node_labels: dict[str, str] | None = None) -> None:
        """Secrets, ConfigMaps and PVCs the kubelet can resolve; labels of the one node."""
        self._call("POST", "/_fake/objects", {"secrets": secrets or {}, "config_maps": config_maps or {},
                                              "pvcs": pvcs or [], "node_labels": node_labels or {}})
