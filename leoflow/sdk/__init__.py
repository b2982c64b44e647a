"""Write DAGs in Python; get the exact spec the YAML would give (``leoflow dags render FILE.py``).

This package only *produces* specs: it imports nothing of the server (no database, API,
scheduler or executor; ``tests/sdk/test_sdk_imports.py``), and the server never imports it or the
user's files. See docs/python-dags.md.
"""

from __future__ import annotations

from leoflow.sdk.dag import DAG, Empty, Task
from leoflow.sdk.located import DagError
from leoflow.sdk.pod import (
    Env,
    EnvFrom,
    KeyRef,
    Output,
    Pod,
    Resources,
    RetryPolicy,
    SecurityContext,
    Toleration,
    Volume,
    VolumeMount,
)
from leoflow.sdk.refs import Ref, item, map_index, run
from leoflow.sdk.script import container_task

__all__ = ["DAG", "DagError", "Empty", "Env", "EnvFrom", "KeyRef", "Output", "Pod", "Ref", "Resources", "RetryPolicy",
           "SecurityContext", "Task", "Toleration", "Volume", "VolumeMount", "container_task", "item", "map_index",
           "run"]
