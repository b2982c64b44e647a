"""The fake server's scheduler and kubelet: pods go Pending → Running → Succeeded/Failed on a timeline.

It does not execute containers: each container's command is interpreted by
:mod:`.fake_k8s_program` (``echo``, ``seq``, ``sleep``, ``exit N``; ``sleep infinity`` never
ends). Per pod:

- **Scheduling** (:mod:`.fake_k8s_node`): a pod whose PVCs do not exist, whose node selector or
  required affinity the node does not match, or who does not tolerate the node's taints stays
  ``Pending`` with ``PodScheduled=False``, reason ``Unschedulable`` and the scheduler's message
  (re-tried every ``backoff_interval``, so a test can fix the node meanwhile).
- **Starting**: an image whose name contains ``pull-error`` (or ``does-not-exist``) keeps its
  container waiting in ``ErrImagePull``/``ImagePullBackOff`` (alternating); ``config-error``,
  or an env/envFrom reference to a Secret or ConfigMap (or key) that :attr:`Kubelet.secrets` /
  :attr:`Kubelet.config_maps` do not have (and is not ``optional``), gives
  ``CreateContainerConfigError`` with the kubelet's message (``secret "pg" not found``).
- **Running**: init containers run first (instantly; a non-zero exit fails the pod); native
  sidecars (init containers with ``restartPolicy: Always``) then run alongside the regular
  containers until every regular container has terminated, and are then stopped (exit 143 for a
  never-ending one). Each regular container ends with its program's exit code after its
  duration; the pod is ``Running`` until all have ended — a never-ending regular sidecar keeps
  it ``Running`` with the ``task`` container terminated — then ``Succeeded`` if all exited 0,
  else ``Failed``.
- ``spec.activeDeadlineSeconds`` is enforced (phase Failed, reason ``DeadlineExceeded``);
  deleting a live pod marks it terminating; the kubelet then stops it and removes the object.
- **Logs** per container (:meth:`Kubelet.log_lines`): the lines written so far, each with the
  wall-clock time it was written (for ``timestamps`` and ``sinceTime``).

Container statuses always carry ``image`` and ``imageID`` (the official client insists on them).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.harness.fake_k8s_node import FakeNode, unschedulable
from tests.harness.fake_k8s_program import Program, interpret
from tests.harness.fake_k8s_store import Pod, PodStore, now_rfc3339

__all__ = ["Kubelet", "Program", "interpret"]

#: Exit code of a never-ending container stopped by the kubelet (SIGTERM).
STOPPED = 143


@dataclass(order=True)
class _Step:
    due: float
    seq: int
    action: str = field(compare=False)
    ns: str = field(compare=False)
    name: str = field(compare=False)
    uid: str = field(compare=False)
    container: str = field(compare=False, default="")


@dataclass
class _Run:
    """One started container."""

    program: Program
    started_mono: float
    started_wall: float
    sidecar: bool = False  # a native sidecar (init container with restartPolicy: Always)
    ended_mono: float | None = None


class Kubelet:
    """A single-node scheduler + kubelet thread driving every pod of the store."""

    def __init__(self, store: PodStore, *, startup_delay: float = 0.02, time_scale: float = 1.0,
                 backoff_interval: float = 0.5, node_name: str = "fake-node") -> None:
        self.store = store
        self.startup_delay = startup_delay
        self.time_scale = time_scale
        self.backoff_interval = backoff_interval
        self.node = FakeNode(node_name)
        self.node_name = node_name
        #: Secrets and ConfigMaps (name -> data) and PVC names the kubelet can resolve.
        self.secrets: dict[str, dict[str, str]] = {}
        self.config_maps: dict[str, dict[str, str]] = {}
        self.pvcs: set[str] = set()
        self.paused = threading.Event()
        self._steps: list[_Step] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._runs: dict[str, dict[str, _Run]] = {}  # uid -> container -> run
        self._previous: dict[str, dict[str, _Run]] = {}  # uid -> container -> the run before a restart
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

    def log_lines(self, uid: str, container: str) -> list[tuple[float, str]] | None:
        """(wall time, text) of each line ``container`` has written so far; None if it never started."""
        run = self._runs.get(uid, {}).get(container)
        if run is None:
            return None
        until = (run.ended_mono if run.ended_mono is not None else time.monotonic()) - run.started_mono
        return [(run.started_wall + offset * self.time_scale, text) for offset, text in run.program.lines
                if offset * self.time_scale <= until]

    def run_of(self, uid: str, container: str) -> object | None:
        """The container's current run (an opaque handle for :meth:`ended`)."""
        return self._runs.get(uid, {}).get(container)

    def previous_log_lines(self, uid: str, container: str) -> list[tuple[float, str]] | None:
        """The lines of ``container``'s run before its last restart (``previous=true``); None if it never restarted."""
        run = self._previous.get(uid, {}).get(container)
        if run is None:
            return None
        until = (run.ended_mono or time.monotonic()) - run.started_mono
        return [(run.started_wall + offset * self.time_scale, text) for offset, text in run.program.lines
                if offset * self.time_scale <= until]

    def ended(self, uid: str, container: str, run: object | None = None) -> bool:
        """Whether ``container`` has stopped (or never ran, or restarted since ``run`` — a follow streams
        one run — or its pod is gone): a log follow ends then."""
        current = self._runs.get(uid, {}).get(container)
        if current is None or current.ended_mono is not None or (run is not None and current is not run):
            return True
        with self.store.cond:
            return not any(p["metadata"]["uid"] == uid for p in self.store.pods.values())

    def logs(self, uid: str, container: str = "task") -> str | None:
        lines = self.log_lines(uid, container)
        return None if lines is None else "".join(f"{text}\n" for _, text in lines)

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, delay: float, action: str, pod: Pod) -> None:
        meta = pod["metadata"]
        self._push(_Step(time.monotonic() + delay, next(self._seq), action, meta["namespace"], meta["name"],
                         meta["uid"]))

    def _then(self, step: _Step, delay: float, action: str, container: str = "") -> None:
        self._push(_Step(time.monotonic() + delay, next(self._seq), action, step.ns, step.name, step.uid, container))

    def _push(self, step: _Step) -> None:
        with self._wake:
            heapq.heappush(self._steps, step)
            self._wake.notify_all()

    def _created(self, pod: Pod) -> None:
        self._schedule(self.startup_delay, "bind", pod)

    def _deleted(self, pod: Pod) -> None:
        if "deletionTimestamp" in pod["metadata"] and pod["metadata"]["namespace"]:
            delay = min(0.05, self.startup_delay)
            if any(self._program(pod, c).ignores_term for c in pod["spec"]["containers"]):
                # SIGTERM changes nothing: the containers stop at the grace period's SIGKILL
                delay = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            self._schedule(delay, "terminate", pod)

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
        current = self.store.pods.get((step.ns, step.name))
        if current is None or current["metadata"]["uid"] != step.uid or "deletionTimestamp" in current["metadata"]:
            return
        why = unschedulable(current["spec"], self.node, self.pvcs)
        if why is not None:
            def pending(pod: Pod) -> bool:
                before = (pod["status"].get("conditions") or [{}])[0]
                if (before.get("reason"), before.get("message")) == ("Unschedulable", why):
                    return False  # unchanged: no event, like the real scheduler
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                "message": why, "lastTransitionTime": now_rfc3339()}]
                return True

            if self._update(step, pending) is not None:
                self._event(step, "FailedScheduling", why, type_="Warning", component="default-scheduler")
            self._then(step, self.backoff_interval, "bind")
            return

        def bind(pod: Pod) -> None:
            pod["spec"]["nodeName"] = self.node_name
            status = pod["status"]
            status.update({"hostIP": "10.0.0.1", "startTime": now_rfc3339()})
            status["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()},
                {"type": "Ready", "status": "False", "lastTransitionTime": now_rfc3339(),
                 "reason": "ContainersNotReady"}]
            if pod["spec"].get("initContainers"):
                status["initContainerStatuses"] = [self._waiting(c, "PodInitializing", None)
                                                   for c in pod["spec"]["initContainers"]]
            status["containerStatuses"] = [self._waiting(c, "ContainerCreating", None)
                                           for c in pod["spec"]["containers"]]

        pod = self._update(step, bind)
        if pod is None:
            return
        self.store.record_event(pod, "Scheduled", f"Successfully assigned {step.ns}/{step.name} to {self.node_name}",
                                component="default-scheduler")
        images = [c["image"] for c in self._all_containers(pod)]
        if self._mount_problem(pod) is not None:
            self._then(step, self.startup_delay, "mount_error")
        elif any("pull-error" in i or "does-not-exist" in i for i in images):
            self._then(step, self.startup_delay, "pull_error")
        elif any("config-error" in i for i in images) or self._config_problem(pod) is not None:
            self._then(step, self.startup_delay, "config_error")
        else:
            self._then(step, self.startup_delay, "run")

    def _event(self, step: _Step, reason: str, message: str, *, type_: str = "Normal", container: str | None = None,
               component: str = "kubelet") -> None:
        """Record an Event about the step's pod (if it is still that pod)."""
        pod = self.store.pods.get((step.ns, step.name))
        if pod is not None and pod["metadata"]["uid"] == step.uid:
            self.store.record_event(pod, reason, message, type_=type_, container=container, component=component)

    def _mount_problem(self, pod: Pod) -> tuple[str, str] | None:
        """(volume, kubelet message) of the first Secret/ConfigMap volume the kubelet cannot mount."""
        for volume in pod["spec"].get("volumes") or []:
            for kind, key, what, known in (("secret", "secretName", "secret", self.secrets),
                                           ("configMap", "name", "configmap", self.config_maps)):
                source = volume.get(kind)
                if source is not None and source.get(key) not in known and not source.get("optional"):
                    return volume["name"], f'{what} "{source.get(key)}" not found'
        return None

    def _mount_error(self, step: _Step) -> None:
        """A volume that cannot be mounted: the pod stays ContainerCreating and ``FailedMount`` repeats."""
        pod = self.store.pods.get((step.ns, step.name))
        if pod is None or pod["metadata"]["uid"] != step.uid or "deletionTimestamp" in pod["metadata"]:
            return
        problem = self._mount_problem(pod)
        if problem is None:  # fixed meanwhile (a test created the Secret): start the pod
            self._then(step, 0.0, "run")
            return
        volume, message = problem
        self._event(step, "FailedMount", f'MountVolume.SetUp failed for volume "{volume}" : {message}',
                    type_="Warning")
        self._then(step, self.backoff_interval, "mount_error")

    @staticmethod
    def _all_containers(pod: Pod) -> list[dict[str, Any]]:
        return [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]

    def _pull_error(self, step: _Step) -> None:
        def fail(pod: Pod) -> bool:
            if "deletionTimestamp" in pod["metadata"]:
                return False
            for group, key in (("initContainers", "initContainerStatuses"), ("containers", "containerStatuses")):
                statuses = pod["status"].get(key) or []
                for i, c in enumerate(pod["spec"].get(group) or []):
                    if "pull-error" not in c["image"] and "does-not-exist" not in c["image"]:
                        continue
                    current = statuses[i]["state"].get("waiting", {}).get("reason")
                    reason = "ImagePullBackOff" if current == "ErrImagePull" else "ErrImagePull"
                    message = (f'Back-off pulling image "{c["image"]}"' if reason == "ImagePullBackOff" else
                               f'rpc error: code = NotFound desc = failed to pull and unpack image "{c["image"]}": '
                               "not found")
                    statuses[i] = self._waiting(c, reason, message)
            return True

        pod = self._update(step, fail)
        if pod is not None:
            for c in self._all_containers(pod):
                if "pull-error" not in c["image"] and "does-not-exist" not in c["image"]:
                    continue
                statuses = [*(pod["status"].get("initContainerStatuses") or []),
                            *(pod["status"].get("containerStatuses") or [])]
                waiting = next((cs["state"].get("waiting") or {} for cs in statuses if cs["name"] == c["name"]), {})
                if waiting.get("reason") == "ErrImagePull":
                    self._event(step, "Pulling", f'Pulling image "{c["image"]}"', container=c["name"])
                    self._event(step, "Failed", f'Failed to pull image "{c["image"]}": {waiting.get("message", "")}',
                                type_="Warning", container=c["name"])
                else:
                    self._event(step, "BackOff", f'Back-off pulling image "{c["image"]}"', container=c["name"])
                    self._event(step, "Failed", "Error: ImagePullBackOff", type_="Warning", container=c["name"])
            self._then(step, self.backoff_interval, "pull_error")

    def _config_error(self, step: _Step) -> None:
        def fail(pod: Pod) -> None:
            message = self._config_problem(pod) or 'secret "missing" not found'
            pod["status"]["containerStatuses"] = [self._waiting(c, "CreateContainerConfigError", message)
                                                  for c in pod["spec"]["containers"]]

        pod = self._update(step, fail)
        if pod is not None:
            message = self._config_problem(pod) or 'secret "missing" not found'
            for c in pod["spec"]["containers"]:
                self._event(step, "Failed", f"Error: {message}", type_="Warning", container=c["name"])

    def _config_problem(self, pod: Pod) -> str | None:
        for container in self._all_containers(pod):
            try:
                self._environment(pod, container)
            except LookupError as exc:
                return str(exc.args[0])
        return None

    def _environment(self, pod: Pod, container: dict[str, Any]) -> dict[str, str]:
        """The container's env as the kubelet resolves it; LookupError with the kubelet's message."""
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            kind = "secretRef" if "secretRef" in source else "configMapRef"
            ref = source[kind]
            data = (self.secrets if kind == "secretRef" else self.config_maps).get(ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise LookupError(f'{"secret" if kind == "secretRef" else "configmap"} "{ref["name"]}" not found')
            env.update({f"{source.get('prefix', '')}{k}": v for k, v in data.items()})
        for entry in container.get("env") or []:
            value_from = entry.get("valueFrom")
            if value_from is None:
                env[entry["name"]] = entry.get("value", "")
                continue
            kind = "secretKeyRef" if "secretKeyRef" in value_from else "configMapKeyRef"
            ref = value_from[kind]
            what = "Secret" if kind == "secretKeyRef" else "ConfigMap"
            data = (self.secrets if kind == "secretKeyRef" else self.config_maps).get(ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                if data is None:
                    raise LookupError(f'{what.lower()} "{ref["name"]}" not found')
                raise LookupError(f"couldn't find key {ref['key']} in {what} {ns}/{ref['name']}")
            env[entry["name"]] = data[ref["key"]]
        return env

    def _program(self, pod: Pod, container: dict[str, Any]) -> Program:
        return interpret([*(container.get("command") or []), *(container.get("args") or [])],
                         self._environment(pod, container))

    def _run(self, step: _Step) -> None:
        started, mono, wall = now_rfc3339(), time.monotonic(), time.time()
        failed_init: list[int] = []

        def run(pod: Pod) -> bool:
            if "deletionTimestamp" in pod["metadata"]:
                return False
            runs = self._runs.setdefault(step.uid, {})
            status = pod["status"]
            init_statuses = []
            for c in pod["spec"].get("initContainers") or []:
                program = self._program(pod, c)
                sidecar = c.get("restartPolicy") == "Always"
                runs[c["name"]] = _Run(program, mono, wall, sidecar=sidecar, ended_mono=None if sidecar else mono)
                if sidecar:
                    init_statuses.append(self._running(c, step.uid, started))
                else:
                    init_statuses.append(self._terminated(c, program.exit_code, started))
                    if program.exit_code != 0:
                        failed_init.append(program.exit_code)
                        break
            if init_statuses:
                status["initContainerStatuses"] = init_statuses
            if failed_init:
                status["phase"] = "Failed"
                status["containerStatuses"] = [self._waiting(c, "PodInitializing", None)
                                               for c in pod["spec"]["containers"]]
                return True
            for c in pod["spec"]["containers"]:
                runs[c["name"]] = _Run(self._program(pod, c), mono, wall)
            status.update({"phase": "Running", "podIP": "10.1.0.7", "podIPs": [{"ip": "10.1.0.7"}]})
            status["conditions"][1].update({"status": "True", "lastTransitionTime": started})
            status["conditions"][1].pop("reason", None)
            status["containerStatuses"] = [self._running(c, step.uid, started) for c in pod["spec"]["containers"]]
            return True

        pod = self._update(step, run)
        if pod is not None:
            for c in self._all_containers(pod):
                if c["name"] in self._runs.get(step.uid, {}):
                    self._event(step, "Pulled", f'Container image "{c["image"]}" already present on machine',
                                container=c["name"])
                    self._event(step, "Created", f"Created container: {c['name']}", container=c["name"])
                    self._event(step, "Started", f"Started container {c['name']}", container=c["name"])
        if pod is None or "deletionTimestamp" in pod["metadata"] or failed_init:
            return
        for c in pod["spec"]["containers"]:
            program = self._runs[step.uid][c["name"]].program
            if not program.endless:
                self._then(step, program.duration * self.time_scale, "finish", c["name"])
        for c in pod["spec"].get("initContainers") or []:
            run_ = self._runs[step.uid].get(c["name"])
            if run_ is not None and run_.sidecar and not run_.program.endless:
                self._then(step, run_.program.duration * self.time_scale, "restart", c["name"])
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            self._then(step, float(deadline), "deadline")

    def _restart(self, step: _Step) -> None:
        """A native sidecar's process ended while the pod runs: the kubelet restarts it (restartPolicy
        Always) — ``restartCount`` + 1, ``lastState`` its end, the old run's log kept for ``previous=true``
        and a fresh log for the new run, whose env has ``FAKE_RESTART_COUNT`` (the fake's own variable)."""
        runs = self._runs.get(step.uid, {})
        old = runs.get(step.container)
        if old is None or old.ended_mono is not None:
            return
        now, wall, started = time.monotonic(), time.time(), now_rfc3339()
        restarted: list[_Run] = []

        def restart(pod: Pod) -> bool:
            if pod["status"].get("phase") != "Running" or "deletionTimestamp" in pod["metadata"]:
                return False
            spec = next(c for c in pod["spec"]["initContainers"] if c["name"] == step.container)
            for cs in pod["status"].get("initContainerStatuses") or []:
                if cs["name"] != step.container:
                    continue
                count = cs.get("restartCount", 0) + 1
                env = {**self._environment(pod, spec), "FAKE_RESTART_COUNT": str(count)}
                program = interpret([*(spec.get("command") or []), *(spec.get("args") or [])], env)
                old.ended_mono = now
                self._previous.setdefault(step.uid, {})[step.container] = old
                fresh = _Run(program, now, wall, sidecar=True)
                runs[step.container] = fresh
                restarted.append(fresh)
                cs["lastState"] = {"terminated": {"exitCode": old.program.exit_code, "reason": "Error" if
                                                  old.program.exit_code else "Completed", "finishedAt": started}}
                cs.update(self._running(spec, step.uid, started))
                cs["restartCount"] = count
            return bool(restarted)

        pod = self._update(step, restart)
        if pod is None or not restarted:
            return
        self._event(step, "Started", f"Started container {step.container}", container=step.container)
        if not restarted[0].program.endless:
            self._then(step, max(restarted[0].program.duration * self.time_scale, self.backoff_interval),
                       "restart", step.container)

    def _finish(self, step: _Step) -> None:
        """One regular container ends with its program's exit code."""
        run = self._runs.get(step.uid, {}).get(step.container)
        if run is None:
            return
        self._stop_containers(step, {step.container: run.program.exit_code}, pod_reason=None)

    def _stop_containers(self, step: _Step, codes: dict[str, int], pod_reason: str | None,
                         stop_all: bool = False) -> None:
        now = time.monotonic()
        runs = self._runs.get(step.uid, {})

        def stop(pod: Pod) -> bool:
            status = pod["status"]
            if status.get("phase") != "Running":
                return False
            specs = {c["name"]: c for c in pod["spec"]["containers"]}
            for cs in status["containerStatuses"]:
                if "running" in cs["state"] and (stop_all or cs["name"] in codes):
                    code = codes.get(cs["name"], 137)
                    cs.update(self._terminated_status(cs, code))
                    if cs["name"] in runs:
                        runs[cs["name"]].ended_mono = now
                        if runs[cs["name"]].program.oom and cs["name"] in codes:
                            cs["state"]["terminated"]["reason"] = "OOMKilled"
                        message = self._termination_message(specs.get(cs["name"], {}), runs[cs["name"]].program)
                        if message:
                            cs["state"]["terminated"]["message"] = message
            regular = status["containerStatuses"]
            if not all("terminated" in cs["state"] for cs in regular):
                return True
            for cs in status.get("initContainerStatuses") or []:  # native sidecars stop last
                if "running" in cs["state"]:
                    run = runs.get(cs["name"])
                    cs.update(self._terminated_status(cs, STOPPED if run is None or run.program.endless
                                                      else run.program.exit_code))
                    if run is not None:
                        run.ended_mono = now
            ok = all(cs["state"]["terminated"]["exitCode"] == 0 for cs in regular)
            status["phase"] = "Succeeded" if ok and not pod_reason else "Failed"
            if pod_reason:
                status["reason"] = pod_reason
                status["message"] = "Pod was active on the node longer than the specified deadline"
            status["conditions"][1].update({"status": "False", "reason": "PodCompleted",
                                            "lastTransitionTime": now_rfc3339()})
            return True

        self._update(step, stop)

    def _deadline(self, step: _Step) -> None:
        self._event(step, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline",
                    type_="Warning")
        self._stop_containers(step, {}, pod_reason="DeadlineExceeded", stop_all=True)

    def _terminate(self, step: _Step) -> None:
        pod = self.store.pods.get((step.ns, step.name))
        if pod is not None and pod["metadata"]["uid"] == step.uid:
            for cs in pod["status"].get("containerStatuses") or []:
                if "running" in cs["state"]:
                    self._event(step, "Killing", f"Stopping container {cs['name']}", container=cs["name"])
        self._stop_containers(step, {}, pod_reason=None, stop_all=True)
        self.store.finalize_delete(step.ns, step.name, step.uid)

    @staticmethod
    def _termination_message(container: dict[str, Any], program: Program) -> str:
        """kuberuntime's ``getTerminationMessage``: the last 4,096 bytes of the file at
        ``terminationMessagePath`` (default ``/dev/termination-log``); policy File never reads logs."""
        path = container.get("terminationMessagePath") or "/dev/termination-log"
        written = program.files.get(path, "").encode()
        return written[-4096:].decode("utf-8", "replace")

    # ------------------------------------------------------------------ status pieces

    @staticmethod
    def _base(c: dict[str, Any]) -> dict[str, Any]:
        return {"name": c["name"], "image": c["image"], "imageID": "", "restartCount": 0}

    def _running(self, c: dict[str, Any], uid: str, started: str) -> dict[str, Any]:
        return {**self._base(c), "imageID": f"docker-pullable://{c['image']}@sha256:{'0' * 64}",
                "containerID": f"containerd://{uid.replace('-', '')}{c['name']}", "ready": True, "started": True,
                "state": {"running": {"startedAt": started}}}

    def _terminated(self, c: dict[str, Any], code: int, started: str) -> dict[str, Any]:
        return {**self._base(c), "ready": False, "started": False, "state": {"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": started,
            "finishedAt": now_rfc3339()}}}

    @staticmethod
    def _terminated_status(cs: dict[str, Any], code: int) -> dict[str, Any]:
        started = cs["state"].get("running", {}).get("startedAt", now_rfc3339())
        return {"ready": False, "started": False, "state": {"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": started,
            "finishedAt": now_rfc3339(), "containerID": cs.get("containerID", "")}}}

    def _waiting(self, c: dict[str, Any], reason: str, message: str | None) -> dict[str, Any]:
        waiting: dict[str, Any] = {"reason": reason}
        if message:
            waiting["message"] = message
        return {**self._base(c), "ready": False, "started": False, "state": {"waiting": waiting}}
