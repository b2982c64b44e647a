"""``leoflow artifacts fetch|upload``: the pod side of task artifacts (internal; not in ``--help``).

On Kubernetes a try whose task declares artifacts gets two extra containers running Leoflow's own
image (leoflow.executor.kubernetes.pod_render), so the task's image needs nothing:

- an init container, ``leoflow artifacts fetch``, unpacks each input artifact into the shared
  ``emptyDir`` before the task starts; a required input that cannot be fetched fails the init
  container with one line naming it, and the pod never runs the task;
- a native sidecar (an init container with ``restartPolicy: Always``), ``leoflow artifacts upload
  --on-signal``, sleeps until the kubelet stops it — which it does once the task container has
  exited — then packs and uploads each output and writes the try's manifest object
  (``artifacts/<cluster>/<try>/manifest.json``), which the executor reads to index the artifacts
  and judge the try (leoflow.model.artifacts.objects.outcome_problem).

The arguments are one JSON list each (``--inputs``/``--outputs``), written by the executor; the
bucket is ``LEOFLOW_LOG_ARCHIVE_URL``, credentials from the provider's chain (IRSA, workload
identity) like the replicas'. The local executor calls the same functions in-process.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

# asyncio and signal are imported where used: registering this verb must not load them for every
# other verb of the CLI (tests/cli/test_import_graph.py).
if TYPE_CHECKING:
    from leoflow.settings import Settings

def register(sub: Any) -> None:
    # No help=: an internal verb of the pods Leoflow renders, left out of ``leoflow --help``.
    parser = sub.add_parser("artifacts", description="the pod side of task artifacts (internal)")
    verbs = parser.add_subparsers(dest="artifacts_command", metavar="VERB", parser_class=type(parser))
    verbs.required = True
    fetch = verbs.add_parser("fetch", description="unpack input artifacts into --root")
    fetch.add_argument("--root", required=True, type=Path)
    fetch.add_argument("--inputs", required=True, help='JSON: [{"name", "key", "path", "digest", "optional"}]')
    fetch.set_defaults(handler=_fetch)
    upload = verbs.add_parser("upload", description="pack and upload output artifacts from --root")
    upload.add_argument("--root", required=True, type=Path)
    upload.add_argument("--cluster", required=True)
    upload.add_argument("--try-id", required=True, type=int)
    upload.add_argument("--outputs", required=True, help='JSON: [{"name", "path", "optional"}]')
    upload.add_argument("--on-signal", action="store_true",
                        help="wait for SIGTERM (the kubelet stopping a native sidecar) before uploading")
    upload.set_defaults(handler=_upload)


def _store(settings: Settings) -> Any:
    from leoflow.errors import SettingsError
    from leoflow.storage.objects import ObjectStore

    url = settings.log_archive.active_url
    if url is None:
        raise SettingsError("LEOFLOW_LOG_ARCHIVE_URL", "is not set: artifacts need object storage")
    return ObjectStore(url, timeout=settings.log_archive.timeout)


def _fetch(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from leoflow.storage.artifacts import fetch_inputs

    inputs = _json_list(args.inputs, "--inputs")
    failed = asyncio.run(fetch_inputs(_store(settings), args.root, inputs, report=print))
    for line in failed:
        print(f"leoflow artifacts: {line}", file=sys.stderr)
    return 1 if failed else 0


def _upload(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from leoflow.executor.artifacts import manifest_key
    from leoflow.model.artifacts.declared import OutputArtifact
    from leoflow.storage.artifacts import upload_outputs

    outputs = [OutputArtifact(str(o["name"]), str(o["path"]), bool(o.get("optional")))
               for o in _json_list(args.outputs, "--outputs")]
    if args.on_signal:
        _wait_for_term()
    store = _store(settings)

    async def run() -> list[dict[str, object]]:
        results = await upload_outputs(store, args.cluster, args.try_id, args.root, outputs)
        manifest = [r.to_json() for r in results]
        await store.put(manifest_key(args.cluster, args.try_id), json.dumps(manifest).encode())
        return manifest

    manifest = asyncio.run(run())
    print(json.dumps({"artifacts": manifest}))
    return 0


def _wait_for_term() -> None:
    """Block until SIGTERM or SIGINT: a native sidecar is stopped only after the task container exited."""
    import signal

    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: received.append(number))
    print(json.dumps({"waiting": "SIGTERM"}), flush=True)  # for the pod's log (and tests): ready
    while not received:
        signal.pause()


def _json_list(text: str, flag: str) -> list[dict[str, Any]]:
    from leoflow.errors import SettingsError

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SettingsError(flag, f"not JSON: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise SettingsError(flag, "must be a JSON list of objects")
    return value
