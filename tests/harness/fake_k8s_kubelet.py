"""The fake server's "kubelet": moves pods Pending → Running → Succeeded/Failed on a timeline.

It does **not** execute containers. It interprets the container's ``command + args`` as a tiny
shell script (``sh -c SCRIPT`` is unwrapped; any other argv is read as one statement), with
statements separated by ``;``, ``&&`` or newlines:

- ``echo WORDS`` → a log line; ``seq N`` → the lines 1..N (for large logs);
- ``sleep SECONDS`` → the container runs that long (times ``time_scale``);
- ``exit N`` → stop with exit code N; ``false`` → exit code 1; ``true`` and anything else → no-op.

Images simulate pull/config problems: an image whose name contains ``pull-error`` (or
``does-not-exist``) stays Pending with the container waiting in ``ErrImagePull``, then
``ImagePullBackOff``, alternating; ``config-error`` gives ``CreateContainerConfigError``.
``spec.activeDeadlineSeconds`` is enforced (phase Failed, reason ``DeadlineExceeded``). Deleting a
live pod marks it terminating; the kubelet then stops it and removes the object. Container
statuses always carry ``image`` and ``imageID`` (the official client insists on them).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import shlex
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.harness.fake_k8s_store import Pod, PodStore, now_rfc3339


@dataclass
class Program:
    logs: str = ""
    duration: float = 0.0
    exit_code: int = 0


def interpret(argv: list[str]) -> Program:
    """What the fake container "does" (see the module docstring)."""
    if len(argv) >= 3 and argv[0] in ("sh", "/bin/sh", "bash", "/bin/bash") and argv[1] == "-c":
        script = argv[2]
    else:
        script = shlex.join(argv)
    program = Program()
    lines: list[str] = []
    for statement in (s.strip() for chunk in script.replace("&&", ";").split("\n") for s in chunk.split(";")):
        try:
            words = shlex.split(statement)
        except ValueError:
            continue
        if not words:
            continue
        verb, rest = words[0], words[1:]
        if verb == "echo":
            lines.append(" ".join(rest))
        elif verb == "seq" and rest and rest[-1].isdigit():
            lines.extend(str(i) for i in range(1, int(rest[-1]) + 1))
        elif verb == "sleep" and rest:
            with contextlib.suppress(ValueError):
                program.duration += float(rest[0])
        elif verb == "exit":
            program.exit_code = int(rest[0]) if rest and rest[0].isdigit() else 0
            break
        elif verb == "false":
            program.exit_code = 1
            break
    program.logs = "".join(f"{line}\n" for line in lines)
    return program


@dataclass(order=True)
class _Step:
    due: float
    seq: int
    action: str = field(compare=False)
    ns: str = field(compare=False)
    name: str = field(compare=False)
    uid: str = field(compare=False)


class Kubelet:
    """A single-node kubelet thread driving every pod of the store."""

    def __init__(self, store: PodStore, *, startup_delay: float = 0.02, time_scale: float = 1.0,
                 backoff_interval: float = 0.5, node_name: str = "fake-node") -> None:
        self.store = store
        self.startup_delay = startup_delay
        self.time_scale = time_scale
        self.backoff_interval = backoff_interval
        self.node_name = node_name
        self.paused = threading.Event()
        self._steps: list[_Step] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._logs: dict[str, str] = {}  # uid -> output so far
        self._programs: dict[str, Program] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        store.on_create.append(self._created)
        store.on_delete.append(self._deleted)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5)

    def logs(self, uid: str) -> str | None:
        return self._logs.get(uid)

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, delay: float, action: str, pod: Pod) -> None:
        meta = pod["metadata"]
        step = _Step(time.monotonic() + delay, next(self._seq), action, meta["namespace"], meta["name"], meta["uid"])
        with self._wake:
            heapq.heappush(self._steps, step)
            self._wake.notify_all()

    def _created(self, pod: Pod) -> None:
        self._schedule(self.startup_delay, "bind", pod)

    def _deleted(self, pod: Pod) -> None:
        if "deletionTimestamp" in pod["metadata"] and pod["metadata"]["namespace"]:
            self._schedule(min(0.05, self.startup_delay), "terminate", pod)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._steps or self._steps[0].due > time.monotonic()
                                             or self.paused.is_set()):
                    timeout = self._steps[0].due - time.monotonic() if self._steps else None
                    self._wake.wait(0.05 if self.paused.is_set() else timeout)
                if self._stopped:
                    return
                step = heapq.heappop(self._steps)
            getattr(self, f"_{step.action}")(step)

    # ------------------------------------------------------------------ transitions

    def _update(self, step: _Step, mutate: Any) -> Pod | None:
        return self.store.update(step.ns, step.name, step.uid, mutate)

    def _bind(self, step: _Step) -> None:
        def bind(pod: Pod) -> None:
            pod["spec"]["nodeName"] = self.node_name
            status = pod["status"]
            status.update({"hostIP": "10.0.0.1", "startTime": now_rfc3339()})
            status["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()},
                {"type": "Ready", "status": "False", "lastTransitionTime": now_rfc3339(),
                 "reason": "ContainersNotReady"}]
            status["containerStatuses"] = [self._waiting(c, "ContainerCreating", None)
                                           for c in pod["spec"]["containers"]]

        pod = self._update(step, bind)
        if pod is None:
            return
        image = pod["spec"]["containers"][0]["image"]
        if "pull-error" in image or "does-not-exist" in image:
            self._schedule_step(step, self.startup_delay, "pull_error")
        elif "config-error" in image:
            self._schedule_step(step, self.startup_delay, "config_error")
        else:
            self._schedule_step(step, self.startup_delay, "run")

    def _schedule_step(self, step: _Step, delay: float, action: str) -> None:
        new = _Step(time.monotonic() + delay, next(self._seq), action, step.ns, step.name, step.uid)
        with self._wake:
            heapq.heappush(self._steps, new)
            self._wake.notify_all()

    def _pull_error(self, step: _Step) -> None:
        def fail(pod: Pod) -> bool:
            if "deletionTimestamp" in pod["metadata"]:
                return False
            current = pod["status"]["containerStatuses"][0]["state"].get("waiting", {}).get("reason")
            reason = "ImagePullBackOff" if current == "ErrImagePull" else "ErrImagePull"
            message = (f'Back-off pulling image "{pod["spec"]["containers"][0]["image"]}"'
                       if reason == "ImagePullBackOff" else "rpc error: code = NotFound desc = failed to pull "
                       f'and unpack image "{pod["spec"]["containers"][0]["image"]}": not found')
            pod["status"]["containerStatuses"] = [self._waiting(c, reason, message)
                                                  for c in pod["spec"]["containers"]]
            return True

        if self._update(step, fail) is not None:
            self._schedule_step(step, self.backoff_interval, "pull_error")

    def _config_error(self, step: _Step) -> None:
        def fail(pod: Pod) -> None:
            pod["status"]["containerStatuses"] = [
                self._waiting(c, "CreateContainerConfigError", 'secret "missing" not found')
                for c in pod["spec"]["containers"]]

        self._update(step, fail)

    def _run(self, step: _Step) -> None:
        started = now_rfc3339()

        def run(pod: Pod) -> bool:
            if "deletionTimestamp" in pod["metadata"]:
                return False
            container = pod["spec"]["containers"][0]
            program = interpret([*(container.get("command") or []), *(container.get("args") or [])])
            self._programs[step.uid] = program
            self._logs[step.uid] = program.logs
            status = pod["status"]
            status.update({"phase": "Running", "podIP": "10.1.0.7", "podIPs": [{"ip": "10.1.0.7"}]})
            status["conditions"][1].update({"status": "True", "lastTransitionTime": started})
            status["conditions"][1].pop("reason", None)
            status["containerStatuses"] = [{
                **self._base(c), "imageID": f"docker-pullable://{c['image']}@sha256:{'0' * 64}",
                "containerID": f"containerd://{step.uid.replace('-', '')}", "ready": True, "started": True,
                "state": {"running": {"startedAt": started}}} for c in pod["spec"]["containers"]]
            return True

        pod = self._update(step, run)
        if pod is None or "deletionTimestamp" in pod["metadata"]:
            return
        program = self._programs[step.uid]
        self._schedule_step(step, program.duration * self.time_scale, "finish")
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            self._schedule_step(step, float(deadline), "deadline")

    def _finish(self, step: _Step, exit_code: int | None = None, reason: str | None = None,
                pod_reason: str | None = None) -> None:
        program = self._programs.get(step.uid, Program())
        code = program.exit_code if exit_code is None else exit_code

        def finish(pod: Pod) -> bool:
            status = pod["status"]
            if status.get("phase") != "Running":
                return False
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            if pod_reason:
                status["reason"] = pod_reason
                status["message"] = "Pod was active on the node longer than the specified deadline"
            status["conditions"][1].update({"status": "False", "reason": "PodCompleted",
                                            "lastTransitionTime": now_rfc3339()})
            for cs in status["containerStatuses"]:
                started = cs["state"].get("running", {}).get("startedAt", now_rfc3339())
                cs.update({"ready": False, "started": False, "state": {"terminated": {
                    "exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error"),
                    "startedAt": started, "finishedAt": now_rfc3339(),
                    "containerID": cs.get("containerID", "")}}})
            return True

        self._update(step, finish)

    def _deadline(self, step: _Step) -> None:
        self._finish(step, exit_code=137, reason="Error", pod_reason="DeadlineExceeded")

    def _terminate(self, step: _Step) -> None:
        self._finish(step, exit_code=137, reason="Error")
        self.store.finalize_delete(step.ns, step.name, step.uid)

    # ------------------------------------------------------------------ status pieces

    @staticmethod
    def _base(c: dict[str, Any]) -> dict[str, Any]:
        return {"name": c["name"], "image": c["image"], "imageID": "", "restartCount": 0}

    def _waiting(self, c: dict[str, Any], reason: str, message: str | None) -> dict[str, Any]:
        waiting: dict[str, Any] = {"reason": reason}
        if message:
            waiting["message"] = message
        return {**self._base(c), "ready": False, "started": False, "state": {"waiting": waiting}}
