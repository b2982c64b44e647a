"""The poison corpus for the HTTP API: each entry is a request and the answer it must get.

Shared by ``tests/inputs/test_poison_api.py`` (every entry, once, against a real server) and
``bench/poison.py`` (all of them on a loop against a 2-replica cluster). Bodies are built from
the limits table (:mod:`leoflow.model.limits`), so moving a limit moves its poison with it.
Entries that must be *accepted* (a value exactly at its limit) sit next to the refused ones.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from leoflow.model import limits

#: The DAG the trigger poisons (and the benchmark's healthy workload) aim at.
HEALTHY = "healthy"
JSON = "application/json"
YAML = "application/yaml"

#: The issue's 349-byte body: nine levels of nine aliases, 58 MB of JSON once expanded.
ALIAS_BOMB = """dag_id: bomb
tasks:
- id: a
  image: x
  command: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  args: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  env: &c {c: [*b,*b,*b,*b,*b,*b,*b,*b,*b]}
x: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
y: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
z: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
w: [*f,*f,*f,*f,*f,*f,*f,*f,*f]
"""


def _env_aliases(variables: int, value_bytes: int) -> bytes:
    """A spec whose env holds ``variables`` aliases of one ``value_bytes``-long string."""
    names = "".join(f"    V{i}: *v\n" for i in range(1, variables))
    return (f"dag_id: env-aliases\ntasks:\n- id: a\n  image: x\n  command: [\"true\"]\n  env:\n"
            f"    V0: &v \"{'x' * value_bytes}\"\n{names}").encode()


def alias_sync_file(index: int) -> str:
    """A DAG file within one file's limits whose extra field stands for ~470,000 values (400 bytes)."""
    levels = "".join(f"x{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 9) + "]\n" for k in range(1, 5))
    return (f"dag_id: alias-{index}\ntasks: [{{id: a, kind: empty}}]\n"
            "x0: &a0 [" + ",".join(["x"] * 9) + "]\n" + levels + "x5: [" + ",".join(["*a4"] * 6) + "]\n")


def cursor_of(raw: bytes) -> str:
    """A ``cursor`` query value made of ``raw`` (the API's cursors are base64url without padding)."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True)
class Poison:
    name: str
    method: str
    path: str
    body: Any  # a JSON-able value, or bytes sent as they are
    content_type: str
    status: int
    #: ``details.field`` of the error ("" for a 2xx; None: not checked, e.g. a 404 past validation).
    field: str | None

    def content(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


def task(task_id: str = "a", **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **fields}


#: A template's task shape (no id: a template is not a task).
SHAPE = {"image": "busybox", "command": ["true"]}


def spec(dag_id: str = "poison", **fields: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": None, "tasks": [task()], **fields}


#: A run of :data:`HEALTHY` that the task-instance route poisons (``?map_index=``) aim at, so their
#: query is judged past the run's lookup. Whoever throws the corpus triggers it first, with this run id.
HEALTHY_RUN = "poison-run"
#: The log route of a run that does not exist: a valid query reaches the 404, a bad one stops at 400.
NO_RUN_LOGS = f"/api/v2/dags/{HEALTHY}/runs/r/tasks/a/logs?"

#: A DAG whose ``params`` hold issue 44's backtracking pattern (``^(a+)+$``: seconds of Python's
#: re for 28 ``a`` and a ``!``, microseconds of RE2). Whoever throws the corpus applies it first
#: (:func:`pattern_dag`), like :data:`HEALTHY`; its trigger poison must be judged at once.
PATTERN_DAG = "backtracking-params"


def pattern_dag() -> dict[str, Any]:
    return spec(PATTERN_DAG, params={"type": "object", "properties": {"name": {"type": "string",
                                                                               "pattern": "^(a+)+$"}}})


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def large_yaml(size: int) -> bytes:
    """A valid YAML text of about ``size`` bytes that is not a valid spec (an unknown field)."""
    row = "  - id: t{i}\n    image: busybox\n    command: [sh, -c, \"echo hello world\"]\n    env: {{A: b}}\n"
    parts, total, i = ["dag_id: big\nnot_a_field: 1\ntasks:\n"], 0, 0
    while total < size:
        parts.append(row.format(i=i))
        total += len(parts[-1])
        i += 1
    return "".join(parts).encode()


def _dag(name: str, body: Any, status: int, field: str | None, ctype: str = JSON) -> Poison:
    return Poison(name, "POST", "/api/v2/dags", body, ctype, status, field)


def _event(name: str, body: Any, ctype: str, status: int, field: str | None) -> Poison:
    return Poison(name, "POST", "/api/v2/datasets/events", body, ctype, status, field)


def _run(name: str, body: Any, status: int, field: str | None, ctype: str = JSON) -> Poison:
    return Poison(name, "POST", f"/api/v2/dags/{HEALTHY}/runs", body, ctype, status, field)


def _artifact_poisons() -> list[Poison]:
    """``artifacts:``: paths that could leave the artifacts directory, bad names and counts, and
    ``from:`` references to nothing; with the values exactly at a limit that must still pass."""
    def out(**fields: Any) -> dict[str, Any]:
        return {"name": "rep", "path": "out", **fields}

    def consumer(source: str, **fields: Any) -> dict[str, Any]:
        return spec(tasks=[task("a", artifacts={"outputs": [out()]}),
                           task("b", depends_on=["a"], artifacts={"inputs": [{"name": "i", "from": source,
                                                                               "path": "in", **fields}]})])

    def producer(*outputs: dict[str, Any]) -> dict[str, Any]:
        return spec(tasks=[task(artifacts={"outputs": list(outputs)})])

    at = "tasks[0].artifacts.outputs[0]"
    listing = f"/api/v2/dags/{HEALTHY}/runs/no-such-run/tasks/a/artifacts"
    most = limits.ARTIFACT_DECLS.maximum
    return [
        _dag("artifacts as a list", spec(tasks=[task(artifacts=[out()])]), 422, "tasks[0].artifacts"),
        _dag("artifact path with ..", producer(out(path="a/../../etc")), 422, f"{at}.path"),
        _dag("artifact path ..", producer(out(path="..")), 422, f"{at}.path"),
        _dag("artifact absolute path", producer(out(path="/etc/passwd")), 422, f"{at}.path"),
        _dag("artifact path with a NUL", producer(out(path="a\x00b")), 422, f"{at}.path"),
        _dag("artifact path of 10 KB", producer(out(path="a" * 10_000)), 422, f"{at}.path"),
        _dag("artifact path of a number", producer(out(path=7)), 422, f"{at}.path"),
        _dag("artifact name with a slash", producer(out(name="a/b")), 422, f"{at}.name"),
        _dag("artifact name of 65 characters", producer(out(name="n" * 65)), 422, f"{at}.name"),
        _dag("artifact optional of a string", producer(out(optional="yes")), 422, f"{at}.optional"),
        _dag("artifact of an unknown field", producer(out(archive="none")), 422, f"{at}.archive"),
        _dag("two artifacts of one name", producer(out(), out(path="other")), 422,
             "tasks[0].artifacts.outputs[1].name"),
        _dag("artifact paths nested", producer(out(), out(name="inner", path="out/inner")), 422,
             "tasks[0].artifacts.outputs[1].path"),
        _dag(f"{most + 1} output artifacts", producer(*[out(name=f"n{i}", path=f"p{i}") for i in range(most + 1)]),
             422, "tasks[0].artifacts.outputs"),
        _dag("artifacts on an empty task",
             spec(tasks=[{"id": "a", "kind": "empty", "artifacts": {"outputs": [out()]}}]), 422, "tasks[0].artifacts"),
        _dag("artifact from an undeclared artifact", consumer("{{ tasks.a.artifacts.nope }}"), 422,
             "tasks[1].artifacts.inputs[0].from"),
        _dag("artifact from an unknown task", consumer("{{ tasks.zz.artifacts.rep }}"), 422,
             "tasks[1].artifacts.inputs[0].from"),
        _dag("artifact from text that is no reference", consumer("s3://bucket/key"), 422,
             "tasks[1].artifacts.inputs[0].from"),
        _dag("artifact from a task downstream", spec(tasks=[
            task("a", artifacts={"inputs": [{"name": "i", "from": "{{ tasks.b.artifacts.rep }}", "path": "in"}]}),
            task("b", depends_on=["a"], artifacts={"outputs": [out()]})]), 422, "tasks[0].artifacts.inputs[0].from"),
        # The artifact routes: a bad query or name is a 400 naming it, before any lookup.
        Poison("artifacts try 0", "GET", f"{listing}?try=0", None, JSON, 400, "try"),
        Poison("artifacts try of 30 digits", "GET", f"{listing}?try={'9' * 30}", None, JSON, 400, "try"),
        Poison("artifacts map_index x", "GET", f"{listing}?map_index=x", None, JSON, 400, "map_index"),
        Poison("artifact name with a dot", "GET", f"{listing}/a.b", None, JSON, 400, "name"),
        Poison("artifact name of 1,000 characters", "GET", f"{listing}/{'n' * 1000}", None, JSON, 400, "name"),
        Poison("artifact download try -1", "GET", f"{listing}/rep?try=-1", None, JSON, 400, "try"),
        Poison("artifact of a run that does not exist", "GET", f"{listing}/rep", None, JSON, 404, None),
        # Exactly at a limit: accepted.
        _dag(f"exactly {most} output artifacts, names of 64 and a path of 255", spec(
            "at-artifacts", tasks=[task(artifacts={"outputs": [
                out(name=f"n{i}".ljust(64, "x"), path=f"p{i}/" + "q" * (limits.ARTIFACT_PATH.maximum - 4))
                for i in range(most)]})]), 201, ""),
    ]


def corpus() -> list[Poison]:
    """Every poison, and the values exactly at a limit that must still be accepted."""
    day = 24 * 3600
    fan_in = [task(f"n{i}") for i in range(300)]
    fan_in += [task(f"m{j}", depends_on=[f"n{i}" for i in range(300)]) for j in range(170)]  # 51,000 edges
    conf_at_limit = {"a": "x" * (limits.CONF.max_bytes - 8)}  # {"a":"…"} is 8 bytes besides the x's
    return [
        # The issue's poisons.
        _dag("timeout 1e12 (the scheduler's OverflowError)", spec(tasks=[task(timeout_seconds=1e12)]), 422,
             "tasks[0].timeout_seconds"),
        _dag("cron that never fires (0 0 31 2 *)", spec(schedule="0 0 31 2 *"), 422, "schedule"),
        _run("conf nested 5,000 deep", b'{"conf": ' + b'{"a": ' * 5_000 + b'"x"' + b"}" * 5_001, 400, "body"),
        _dag("YAML alias bomb (349 bytes)", ALIAS_BOMB.encode(), 413, "body", YAML),
        _dag("YAML aliases in env past the body limit", _env_aliases(20, 60_000), 413, "body", YAML),
        # One per limit, just past it.
        _dag("timeout 30 days + 1 s", spec(tasks=[task(timeout_seconds=30 * day + 1)]), 422,
             "tasks[0].timeout_seconds"),
        _dag("timeout 0", spec(tasks=[task(timeout_seconds=0)]), 422, "tasks[0].timeout_seconds"),
        _dag("retry_delay_seconds 7 days + 1 s", spec(tasks=[task(retry_delay_seconds=7 * day + 1)]), 422,
             "tasks[0].retry_delay_seconds"),
        _dag("retry_delay_seconds 1e308", spec(tasks=[task(retry_delay_seconds=1e308)]), 422,
             "tasks[0].retry_delay_seconds"),
        _dag("max_retry_delay_seconds -1", spec(tasks=[task(max_retry_delay_seconds=-1)]), 422,
             "tasks[0].max_retry_delay_seconds"),
        _dag("retries 1,001", spec(tasks=[task(retries=1_001)]), 422, "tasks[0].retries"),
        _dag("default_retries -1", spec(default_retries=-1), 422, "default_retries"),
        _dag("max_active_runs 10^12", spec(max_active_runs=10**12), 422, "max_active_runs"),
        _dag("max_active_runs 0", spec(max_active_runs=0), 422, "max_active_runs"),
        _dag("an integer of 5,000 digits", b'{"dag_id": "p", "max_active_runs": ' + b"9" * 5000 + b', "tasks": []}',
             400, "body"),
        _dag("start_date in year 9999 (UTC overflow)", spec(schedule="@daily", start_date="9999-12-31T23:59:59-12:00"),
             422, "start_date"),
        _dag("start_date 2200-01-01", spec(start_date="2200-01-01T00:00:00Z"), 422, "start_date"),
        _dag("start_date 1969-12-31", spec(start_date="1969-12-31T23:59:59Z"), 422, "start_date"),
        _dag("cron of 257 characters", spec(schedule="0 0 * *" + " " * 249 + "*"), 422, "schedule"),
        _dag("timezone of 65 characters", spec(timezone="A" * 65), 422, "timezone"),
        _dag("description of 2,001 characters", spec(description="d" * 2001), 422, "description"),
        _dag("image of 501 characters", spec(tasks=[task(image="i" * 501)]), 422, "tasks[0].image"),
        _dag("10,001 tasks", spec(tasks=[task(f"t{i}") for i in range(10_001)]), 422, "tasks"),
        _dag("51,000 dependencies", spec(tasks=fan_in), 422, "tasks"),
        _dag("env of 64 KiB + 1 byte", spec(tasks=[task(env={"A": "x" * (limits.ENV.max_bytes - 7)})]), 422,
             "tasks[0].env"),
        _dag("YAML aliases in env past the env limit", _env_aliases(3, 30_000), 422, "tasks[0].env", YAML),
        _dag("command of 1,001 items", spec(tasks=[task(command=["x"] * 1_001)]), 422, "tasks[0].command"),
        _dag("command with a NUL character", spec(tasks=[task(command=["a\u0000b"])]), 422, "tasks[0].command[0]"),
        _dag("a lone surrogate", b'{"dag_id": "p", "description": "\\ud800", "tasks": []}', 422, "description"),
        _dag("dag_id of 51 characters", spec(dag_id="d" * 51), 422, "dag_id"),
        _dag("task id with a newline", spec(tasks=[task("a\n")]), 422, "tasks[0].id"),
        _dag("quantity 1e400 (infinite)", b'{"dag_id": "p", "tasks": [{"id": "a", "image": "x", "command": ["true"], '
             b'"resources": {"limits": {"cpu": 1e400}}}]}', 422, "tasks[0].resources.limits.cpu"),
        _dag("quantity of 33 characters", spec(tasks=[task(resources={"limits": {"cpu": "1" * 33}})]), 422,
             "tasks[0].resources.limits.cpu"),
        _run("conf nested 33 deep", {"conf": nested(limits.CONF.max_depth + 1)}, 422, "conf"),
        _run("conf of 64 KiB + 1 byte", {"conf": {"a": "x" * (limits.CONF.max_bytes - 7)}}, 422, "conf"),
        _run("conf of 10,001 keys and items", {"conf": {"a": [0] * 10_000}}, 422, "conf"),
        _run("conf NaN", b'{"conf": {"a": NaN}}', 400, "body"),
        _run("conf with a NUL character", {"conf": {"a": "\u0000"}}, 422, "conf.a"),
        _run("conf from YAML with a date", b"conf: {day: 2026-01-01}\n", 422, "conf.day", YAML),
        _run("run_id of 251 characters", {"run_id": "r" * 251}, 422, "run_id"),
        _run("run_id with a newline", {"run_id": "r\n"}, 422, "run_id"),
        Poison("conf against a backtracking pattern (^(a+)+$, 28 a and !)", "POST",
               f"/api/v2/dags/{PATTERN_DAG}/runs", {"conf": {"name": "a" * 28 + "!"}}, JSON, 422, "conf.name"),
        _dag("params pattern with a backreference (RE2 cannot run it)", spec(params={
            "type": "object", "properties": {"name": {"type": "string", "pattern": r"^(a)\1$"}}}), 422,
            "params.properties.name.pattern"),
        _dag("params with $ref: '#' (recursing forever)", spec(params={"type": "object", "$ref": "#"}), 422,
             "params.$ref"),
        _dag("scheduled params whose default backtracks", spec(schedule="@daily", params={
            "type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$",
                                                      "default": "a" * 28 + "!"}}}), 422,
             "params.properties.name.default"),  # every DAG's defaults are checked against their property
        _run("run_id taking a scheduled slot (scheduled__…)", {"run_id": "scheduled__2026-11-28T22:27:00+00:00"},
             422, "run_id"),
        # The cluster's pod policy (nothing allowed by default): a DAG author cannot ask for the node.
        _dag("pod_template with a hostPath volume of /", spec(tasks=[task(pod_template={"spec": {"volumes": [
            {"name": "root", "hostPath": {"path": "/"}}]}})]), 422, "tasks[0].pod_template.spec.volumes[0].hostPath"),
        _dag("pod_template with a privileged init container", spec(tasks=[task(pod_template={"spec": {
            "initContainers": [{"name": "i", "image": "busybox", "securityContext": {"privileged": True}}]}})]), 422,
            "tasks[0].pod_template.spec.initContainers[0].securityContext.privileged"),
        _dag("pod_template with hostNetwork", spec(tasks=[task(pod_template={"spec": {"hostNetwork": True}})]), 422,
             "tasks[0].pod_template.spec.hostNetwork"),
        _dag("security_context adding SYS_ADMIN", spec(tasks=[task(security_context={"container": {
            "capabilities": {"add": ["SYS_ADMIN"]}}})]), 422, "tasks[0].security_context.container.capabilities.add"),
        _dag("pod_template with another service account", spec(tasks=[task(pod_template={"spec": {
            "serviceAccountName": "cluster-admin"}})]), 422, "tasks[0].pod_template.spec.serviceAccountName"),
        # Templates in command/args/env (ADR 0014): a {{ that opens no valid reference is a 422, never a literal.
        _dag("template never closed", spec(tasks=[task(args=["{{ run.id"])]), 422, "tasks[0].args[0]"),
        _dag("template with a filter", spec(tasks=[task(args=["{{ run.id | upper }}"])]), 422, "tasks[0].args[0]"),
        _dag("template of an undeclared param", spec(tasks=[task(env={"A": "{{ params.x }}"})]), 422, "tasks[0].env.A"),
        _dag("template of a downstream task", spec(tasks=[task("a", args=["{{ tasks.b.outputs.x }}"]), task(
            "b", depends_on=["a"], outputs={"x": {"type": "string"}})]), 422, "tasks[0].args[0]"),
        _dag("template of an unknown name", spec(tasks=[task(command=["{{ secrets.token }}"])]), 422,
             "tasks[0].command[0]"),
        _dag("template {{ item }} outside a map", spec(tasks=[task(args=["{{ item }}"])]), 422, "tasks[0].args[0]"),
        _dag("65 references in one string", spec(tasks=[task(args=["{{ run.id }}" * 65])]), 422, "tasks[0].args[0]"),
        _dag("30,000 unclosed {{ in one string", spec(tasks=[task(args=["{{" * 30_000])]), 422, "tasks[0].args[0]"),
        # Conditions (ADR 0014 decision 4): CEL checked and bounded at apply; 1,024 characters still fit.
        _dag("when with a syntax error", spec(tasks=[task(when="run.id ==")]), 422, "tasks[0].when"),
        _dag("when of 2,000 nested parentheses", spec(tasks=[task(when="(" * 2_000 + "true" + ")" * 2_000)]), 422,
             "tasks[0].when"),
        _dag("when with map() (quadratic)", spec(tasks=[task(when="[1].map(x, x).size() > 0")]), 422, "tasks[0].when"),
        _dag("when with a macro inside a macro", spec(tasks=[task(when="[1].exists(x, [2].all(y, y > x))")]), 422,
             "tasks[0].when"),
        _dag("when with 5 macros", spec(tasks=[task(when=" && ".join(["[1].all(x, x > 0)"] * 5))]), 422,
             "tasks[0].when"),
        _dag("when over an unknown name", spec(tasks=[task(when="secrets.token == 'x'")]), 422, "tasks[0].when"),
        _dag("when as a number", spec(tasks=[task(when=1)]), 422, "tasks[0].when"),
        _dag("when that is a string (a declared string param)", spec(tasks=[task(when="params.day")], params={
            "type": "object", "properties": {"day": {"type": "string"}}}), 422, "tasks[0].when"),
        _dag("skip_on_exit_code 256", spec(tasks=[task(skip_on_exit_code=[256])]), 422,
             "tasks[0].skip_on_exit_code[0]"),
        _dag("33 skip exit codes", spec(tasks=[task(skip_on_exit_code=list(range(33)))]), 422,
             "tasks[0].skip_on_exit_code"),
        _dag("when exactly 1,024 characters", spec("when-at-limit", tasks=[task(
            when=("true" + " || true" * 127).ljust(limits.WHEN.maximum))]), 201, ""),
        # Declared outputs (ADR 0014 decision 1): names, types and how many.
        _dag("an output named like a path", spec(tasks=[task(outputs={"../x": {"type": "string"}})]), 422,
             "tasks[0].outputs"),
        _dag("an output of an unknown type", spec(tasks=[task(outputs={"x": {"type": "bytes"}})]), 422,
             "tasks[0].outputs.x.type"),
        _dag("65 declared outputs", spec(tasks=[task(outputs={f"o{i}": {"type": "any"} for i in range(65)})]), 422,
             "tasks[0].outputs"),
        _dag("outputs as a list", spec(tasks=[task(outputs=["x"])]), 422, "tasks[0].outputs"),
        # Exit tasks and retry policies (ADR 0014 decisions 7 and 5).
        _dag("21 exit tasks", spec(on_exit=[task(f"e{i}") for i in range(21)]), 422, "on_exit"),
        _dag("an exit task depending on a task", spec(on_exit=[task("e", depends_on=["a"])]), 422,
             "on_exit[0].depends_on[0]"),
        _dag("an exit task named like a task", spec(on_exit=[task("a")]), 422, "on_exit[0].id"),
        _dag("on_exit as a mapping", spec(on_exit={"id": "e"}), 422, "on_exit"),
        _dag("retry factor 1e308", spec(tasks=[task(retries=3, retry_policy={"factor": 1e308})]), 422,
             "tasks[0].retry_policy.factor"),
        _dag("retry when of 2,000 nested parentheses", spec(tasks=[task(retry_policy={
            "when": "(" * 2_000 + "true" + ")" * 2_000})]), 422, "tasks[0].retry_policy.when"),
        _dag("retry when over params", spec(tasks=[task(retry_policy={"when": "params.x == 1"})]), 422,
             "tasks[0].retry_policy.when"),
        _dag("retry exit code 256", spec(tasks=[task(retry_policy={"on_exit_codes": [256]})]), 422,
             "tasks[0].retry_policy.on_exit_codes[0]"),
        # Reusable templates (templates:, uses:, inputs:) and cluster templates.
        _dag("201 templates", spec(templates=[{"name": f"t{i}", **SHAPE} for i in range(201)]), 422,
             "templates"),
        _dag("templates as a mapping", spec(templates={"name": "t"}), 422, "templates"),
        _dag("a template with depends_on", spec(templates=[{"name": "t", **SHAPE, "depends_on": ["a"]}]), 422,
             "templates[0].depends_on"),
        _dag("a template using another", spec(templates=[{"name": "t", **SHAPE, "uses": "u"}]), 422,
             "templates[0].uses"),
        _dag("a template with an unknown field", spec(templates=[{"name": "t", **SHAPE, "colour": 1}]), 422,
             "templates[0].colour"),
        _dag("an undeclared input in a template", spec(templates=[{"name": "t", **SHAPE,
                                                                   "args": ["{{ inputs.nope }}"]}]), 422,
             "templates[0].args[0]"),
        _dag("65 inputs", spec(templates=[{"name": "t", **SHAPE, "inputs": {f"i{n}": {} for n in range(65)}}]),
             422, "templates[0].inputs"),
        _dag("uses an unknown template", spec(tasks=[{"id": "a", "uses": "ghost"}]), 422, "tasks[0].uses"),
        _dag("uses a missing cluster template", spec(tasks=[{"id": "a", "uses": "cluster/ghost@3"}]), 422,
             "tasks[0].uses"),
        _dag("uses cluster/../x", spec(tasks=[{"id": "a", "uses": "cluster/../x"}]), 422, "tasks[0].uses"),
        _dag("uses a number", spec(tasks=[{"id": "a", "uses": 7}]), 422, "tasks[0].uses"),
        _dag("a missing required input", spec(templates=[{"name": "t", **SHAPE, "inputs": {"p": {}}}],
                                              tasks=[{"id": "a", "uses": "t"}]), 422, "tasks[0].uses"),
        _dag("an unknown input", spec(templates=[{"name": "t", **SHAPE}],
                                      tasks=[{"id": "a", "uses": "t", "inputs": {"zz": 1}}]), 422,
             "tasks[0].inputs.zz"),
        _dag("an input of the wrong type", spec(templates=[{"name": "t", **SHAPE, "inputs": {"n": {
            "type": "integer"}}}], tasks=[{"id": "a", "uses": "t", "inputs": {"n": "1e400"}}]), 422,
             "tasks[0].inputs.n"),
        _dag("an input naming an input", spec(templates=[{"name": "t", **SHAPE, "inputs": {"p": {}},
                                                          "args": ["{{ inputs.p }}"]}],
                                              tasks=[{"id": "a", "uses": "t", "inputs": {"p": "{{ inputs.p }}"}}]),
             422, "tasks[0].inputs.p"),
        _dag("an input 64 times over 60 KB", spec(templates=[{"name": "t", **SHAPE, "inputs": {"p": {}},
                                                              "args": ["{{ inputs.p }}" * 64]}],
                                                  tasks=[{"id": "a", "uses": "t", "inputs": {"p": "x" * 60_000}}]),
             422, "tasks[0].args[0]"),
        _dag("inputs without uses", spec(tasks=[task(inputs={"p": 1})]), 422, "tasks[0].inputs"),
        Poison("cluster template with depends_on", "PUT", "/api/v2/templates/poison", {**SHAPE, "depends_on": []},
               JSON, 422, "depends_on"),
        Poison("cluster template named in the body otherwise", "PUT", "/api/v2/templates/poison",
               {**SHAPE, "name": "other"}, JSON, 422, "name"),
        Poison("cluster template of 300 KB", "PUT", "/api/v2/templates/poison", {**SHAPE, "args": ["a" * 300_000]},
               JSON, 422, "args[0]"),
        Poison("cluster template nested 200,000 deep", "PUT", "/api/v2/templates/poison",
               b"[" * 200_000 + b"]" * 200_000, JSON, 400, "body"),
        Poison("cluster template as a list", "PUT", "/api/v2/templates/poison", [1], JSON, 422, "body"),
        Poison("cluster template version 0", "GET", "/api/v2/templates/poison?version=0", None, JSON, 400,
               "version"),
        # Datasets: produces and a dataset schedule, checked at apply.
        _dag("produces a string", spec(tasks=[task(produces="s3://a")]), 422, "tasks[0].produces"),
        _dag("produces an empty URI", spec(tasks=[task(produces=[""])]), 422, "tasks[0].produces[0]"),
        _dag("produces a 10 KB URI", spec(tasks=[task(produces=["s3://" + "a" * 10_000])]), 422,
             "tasks[0].produces[0]"),
        _dag("produces a URI with a newline", spec(tasks=[task(produces=["s3://a\nb"])]), 422, "tasks[0].produces[0]"),
        _dag("produces a URI twice", spec(tasks=[task(produces=["u", "u"])]), 422, "tasks[0].produces[1]"),
        _dag("produces 101 URIs", spec(tasks=[task(produces=[f"u{i}" for i in range(101)])]), 422,
             "tasks[0].produces"),
        _dag("dataset schedule without all/any", spec(schedule={"datasets": {}}), 422, "schedule.datasets"),
        _dag("dataset schedule with all and any", spec(schedule={"datasets": {"all": ["a"], "any": ["b"]}}), 422,
             "schedule.datasets"),
        _dag("dataset schedule of a number", spec(schedule={"datasets": {"any": 3}}), 422, "schedule.datasets.any"),
        _dag("dataset schedule of 101 URIs", spec(schedule={"datasets": {"any": [f"u{i}" for i in range(101)]}}),
             422, "schedule.datasets.any"),
        _dag("dataset schedule with a control character", spec(schedule={"datasets": {"all": ["a\tb"]}}), 422,
             "schedule.datasets.all[0]"),
        _dag("schedule mapping with another key", spec(schedule={"at": "@daily"}), 422, "schedule.at"),
        _dag("dataset schedule with an empty URI", spec(schedule={"datasets": {"all": [""]}}), 422,
             "schedule.datasets.all[0]"),
        _dag("dataset schedule with a 10 KB URI", spec(schedule={"datasets": {"any": ["s3://" + "a" * 10_000]}}),
             422, "schedule.datasets.any[0]"),
        # A cron AND datasets (combine: and): the slot waits for its data.
        _dag("combine of an unknown value", spec(schedule={"cron": "@daily", "datasets": {"all": ["u"]},
                                                           "combine": "both"}), 422, "schedule.combine"),
        _dag("combine without a cron", spec(schedule={"datasets": {"all": ["u"]}, "combine": "and"}), 422,
             "schedule.combine"),
        _dag("combine and with catchup", spec(schedule={"cron": "@daily", "datasets": {"all": ["u"]},
                                                        "combine": "and"}, catchup=True), 422, "catchup"),
        _dag("combine and with overlap replace", spec(schedule={"cron": "@daily", "datasets": {"all": ["u"]},
                                                                "combine": "and"}, overlap="replace"), 422, "overlap"),
        # Schedule forms, end_date, overlap, starting deadline and a trigger's logical_date.
        _dag("cron without the datasets it comes with", spec(schedule={"cron": "@daily"}), 422, "schedule.datasets"),
        _dag("a list of 50 crons", spec(schedule=[f"{m} * * * *" for m in range(50)]), 422, "schedule"),
        _dag("a list of crons with one that never fires", spec(schedule=["@daily", "0 0 31 2 *"]), 422,
             "schedule[1]"),
        _dag("every 5 seconds", spec(schedule={"every": "5s"}), 422, "schedule.every"),
        _dag("every of 10,000 digits", spec(schedule={"every": "9" * 10_000 + "m"}), 422, "schedule.every"),
        _dag("every 10^300 seconds", spec(schedule={"every": 1e300}), 422, "schedule.every"),
        _dag("end_date before start_date", spec(schedule="@daily", start_date="2026-02-01T00:00:00Z",
                                                end_date="2026-01-01T00:00:00Z"), 422, "end_date"),
        _dag("end_date in year 9999 (UTC overflow)", spec(schedule="@daily", end_date="9999-12-31T23:59:59-12:00"),
             422, "end_date"),
        _dag("overlap of an unknown policy", spec(schedule="@daily", overlap="Forbid"), 422, "overlap"),
        _dag("overlap replace with catchup", spec(schedule="@daily", overlap="replace", catchup=True), 422,
             "overlap"),
        _dag("starting deadline of NaN-like text", spec(schedule="@daily", starting_deadline_seconds="nan"), 422,
             "starting_deadline_seconds"),
        _dag("starting deadline of 10^12 s", spec(schedule="@daily", starting_deadline_seconds=1e12), 422,
             "starting_deadline_seconds"),
        _run("logical_date without an offset", {"logical_date": "2026-01-01T00:00:00"}, 422, "logical_date"),
        _run("logical_date in year 9999 (UTC overflow)", {"logical_date": "9999-12-31T23:59:59-12:00"}, 422,
             "logical_date"),
        _run("logical_date of 100 KB", {"logical_date": "2" * 100_000}, 422, "logical_date"),
        # Waits (wait_for, depends_on_past) and approvals: checked at apply; a decision's body at once.
        _dag("wait_for a DAG that does not exist", spec(tasks=[task(wait_for=[{"dag": "no-such-dag"}])]), 422,
             "tasks[0].wait_for[0].dag"),
        _dag("wait_for a string", spec(tasks=[task(wait_for="healthy")]), 422, "tasks[0].wait_for"),
        _dag("wait_for with two kinds", spec(tasks=[task(wait_for=[{"dag": "healthy", "not_before": "1h"}])]), 422,
             "tasks[0].wait_for[0]"),
        _dag("wait_for offset of 10,000 digits", spec(tasks=[task(wait_for=[{"dag": "healthy",
                                                                              "offset": "9" * 10_000 + "d"}])]),
             422, "tasks[0].wait_for[0].offset"),
        _dag("wait_for not_before of 10^300 s", spec(tasks=[task(wait_for=[{"not_before": 1e300}])]), 422,
             "tasks[0].wait_for[0].not_before"),
        _dag("wait_for a running state", spec(tasks=[task(wait_for=[{"dag": "healthy", "states": ["running"]}])]),
             422, "tasks[0].wait_for[0].states[0]"),
        _dag("wait_for a 10 KB dataset URI", spec(tasks=[task(wait_for=[{"dataset": "s3://" + "a" * 10_000}])]), 422,
             "tasks[0].wait_for[0].dataset"),
        _dag("wait_for a timeout of 10^12 s", spec(tasks=[task(wait_for=[{"approval": {},
                                                                          "timeout_seconds": 1e12}])]),
             422, "tasks[0].wait_for[0].timeout_seconds"),
        _dag("wait_for 21 conditions", spec(tasks=[task(wait_for=[{"dataset": f"u{i}"}
                                                                  for i in range(limits.WAIT_FOR.maximum + 1)])]),
             422, "tasks[0].wait_for"),
        _dag("approval message of 10 KB", spec(tasks=[task(wait_for=[{"approval": {"message": "m" * 10_000}}])]),
             422, "tasks[0].wait_for[0].approval.message"),
        _dag("depends_on_past of a string", spec(tasks=[task(depends_on_past="true")]), 422,
             "tasks[0].depends_on_past"),
        # Artifacts: names, paths and from: references, checked at apply.
        *_artifact_poisons(),
        Poison("approval of a task that does not wait", "POST",
               f"/api/v2/dags/{HEALTHY}/runs/no-such-run/tasks/t/approval", {"decision": "approve"}, JSON, 404, None),
        Poison("approval with a 100 KB comment", "POST", f"/api/v2/dags/{HEALTHY}/runs/r/tasks/t/approval",
               {"decision": "reject", "comment": "c" * 100_000}, JSON, 422, "comment"),
        Poison("approval deciding 'maybe'", "POST", f"/api/v2/dags/{HEALTHY}/runs/r/tasks/t/approval",
               {"decision": "maybe"}, JSON, 422, "decision"),
        # Dataset events from outside (POST /api/v2/datasets/events) and the list's query.
        _event("dataset event without uri", {"extra": {}}, JSON, 422, "uri"),
        _event("dataset event with an empty uri", {"uri": ""}, JSON, 422, "uri"),
        _event("dataset event with a 10 KB uri", {"uri": "s3://" + "a" * 10_000}, JSON, 422, "uri"),
        _event("dataset event with a control character", {"uri": "s3://a\x1bb"}, JSON, 422, "uri"),
        _event("dataset event with a list extra", {"uri": "s3://a", "extra": [1]}, JSON, 422,
               "extra"),
        _event("dataset event with 20 KB of extra", {"uri": "s3://a", "extra": {"k": "v" * 20_000}},
               JSON, 422, "extra"),
        _event("dataset event extra nested 9 deep", {"uri": "s3://a", "extra": nested(9)}, JSON, 422,
               "extra"),
        _event("dataset event as a string", "s3://a", JSON, 422, "body"),
        _event("dataset event of 1,000 characters", {"uri": "s3://" + "a" * 995}, JSON, 201, ""),
        _event("dataset event list, empty", {"events": []}, JSON, 422, "events"),
        _event("dataset event list of 1,001", {"events": [{"uri": "s3://a"}] * 1_001}, JSON, 422, "events"),
        _event("dataset event list with a 10 KB uri third", {"events": [{"uri": "s3://a"}, {"uri": "s3://b"},
                                                                         {"uri": "s3://" + "c" * 10_000}]},
               JSON, 422, "events[2].uri"),
        _event("dataset event list of strings", {"events": ["s3://a"]}, JSON, 422, "events[0]"),
        _event("dataset event list of 1,000", {"events": [{"uri": "s3://a"}] * 1_000}, JSON, 201, ""),
        Poison("datasets ?uri= with a tab", "GET", "/api/v2/datasets?uri=a%09b", None, JSON, 400, "uri"),
        Poison("datasets ?limit=0", "GET", "/api/v2/datasets?limit=0", None, JSON, 400, "limit"),
        # Mapped tasks (ADR 0014 decision 3): the source's shape and size are checked at apply.
        _dag("map_over a string", spec(tasks=[task(map_over="a,b,c")]), 422, "tasks[0].map_over"),
        _dag("map_over an object", spec(tasks=[task(map_over={"a": 1})]), 422, "tasks[0].map_over"),
        _dag("map_over a number", spec(tasks=[task(map_over=3)]), 422, "tasks[0].map_over"),
        _dag("map_over 10,001 items", spec(tasks=[task(map_over=list(range(limits.MAP_ITEMS.maximum + 1)))]), 422,
             "tasks[0].map_over"),
        _dag("map_over 64 strings of 4 KiB", spec(tasks=[task(map_over=["x" * 4096] * 64)]), 422,
             "tasks[0].map_over"),
        _dag("map_over count -1", spec(tasks=[task(map_over={"count": -1})]), 422, "tasks[0].map_over.count"),
        _dag("map_over count 10,001", spec(tasks=[task(map_over={"count": limits.MAP_ITEMS.maximum + 1})]), 422,
             "tasks[0].map_over.count"),
        _dag("map_over count 1.5", spec(tasks=[task(map_over={"count": 1.5})]), 422, "tasks[0].map_over.count"),
        _dag("map_over count beside another key", spec(tasks=[task(map_over={"count": 2, "start": 1})]), 422,
             "tasks[0].map_over"),
        _dag("map_over text around a reference", spec(tasks=[task(map_over="parts: {{ params.days }}")], params={
            "type": "object", "properties": {"days": {"type": "array"}}}), 422, "tasks[0].map_over"),
        _dag("map_over two references", spec(tasks=[task(map_over="{{ params.days }}{{ params.days }}")], params={
            "type": "object", "properties": {"days": {"type": "array"}}}), 422, "tasks[0].map_over"),
        _dag("map_over an undeclared param", spec(tasks=[task(map_over="{{ params.days }}")]), 422,
             "tasks[0].map_over"),
        _dag("map_over run.id", spec(tasks=[task(map_over="{{ run.id }}")]), 422, "tasks[0].map_over"),
        _dag("map_over a downstream task's output", spec(tasks=[
            task("a", map_over="{{ tasks.b.outputs.parts }}"),
            task("b", depends_on=["a"], outputs={"parts": {"type": "array"}})]), 422, "tasks[0].map_over"),
        _dag("map_over an undeclared output", spec(tasks=[task("a"), task(
            "b", depends_on=["a"], map_over="{{ tasks.a.outputs.parts }}")]), 422, "tasks[1].map_over"),
        _dag("map_over with a template syntax error", spec(tasks=[task(map_over="{{ params.days")]), 422,
             "tasks[0].map_over"),
        _dag("max_parallel 0", spec(tasks=[task(map_over=[1, 2], max_parallel=0)]), 422, "tasks[0].max_parallel"),
        _dag("max_parallel 10^12", spec(tasks=[task(map_over=[1, 2], max_parallel=10**12)]), 422,
             "tasks[0].max_parallel"),
        _dag("max_parallel without map_over", spec(tasks=[task(max_parallel=4)]), 422, "tasks[0].max_parallel"),
        _dag("map_over on an exit task", spec(on_exit=[task("e", map_over=[1, 2])]), 422, "on_exit[0].map_over"),
        _dag("template {{ map_index }} outside a map", spec(tasks=[task(env={"I": "{{ map_index }}"})]), 422,
             "tasks[0].env.I"),
        _dag("template {{ item.k }} outside a map", spec(tasks=[task(command=["echo", "{{ item.k }}"])]), 422,
             "tasks[0].command[1]"),
        Poison("task map_index -1", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a?map_index=-1", None,
               JSON, 400, "map_index"),
        Poison("task map_index x", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a?map_index=x", None,
               JSON, 400, "map_index"),
        Poison("task map_index 10,000", "GET",
               f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a?map_index={limits.MAP_ITEMS.maximum}", None,
               JSON, 400, "map_index"),
        Poison("outputs map_index -1", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/outputs?map_index=-1",
               None, JSON, 400, "map_index"),
        Poison("outputs map_index x", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/outputs?map_index=x",
               None, JSON, 400, "map_index"),
        Poison("outputs map_index 10,000", "GET",
               f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/outputs?map_index={limits.MAP_ITEMS.maximum}",
               None, JSON, 400, "map_index"),
        Poison("logs map_index -1", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/logs?map_index=-1",
               None, JSON, 400, "map_index"),
        Poison("logs map_index x", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/logs?map_index=x",
               None, JSON, 400, "map_index"),
        Poison("logs map_index 10,000", "GET",
               f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/logs?map_index={limits.MAP_ITEMS.maximum}",
               None, JSON, 400, "map_index"),
        Poison("logs map_index 1e3", "GET", f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a/logs?map_index=1e3",
               None, JSON, 400, "map_index"),
        _dag("YAML nested 200,000 deep", b"[" * 200_000 + b"]" * 200_000, 400, "body", YAML),
        _dag("JSON nested 200,000 deep", b"[" * 200_000 + b"]" * 200_000, 400, "body"),
        _dag("YAML with a recursive alias", b"dag_id: &a [1, *a]\n", 400, "body", YAML),
        _dag("YAML with duplicate keys", b"dag_id: a\ndag_id: b\n", 400, "body", YAML),
        _dag("YAML with a python tag", b"dag_id: !!python/object/apply:os.system [true]\n", 400, "body", YAML),
        _dag("YAML with an integer of 5,000 digits", b"max_active_runs: " + b"9" * 5000 + b"\n", 400, "body", YAML),
        _dag("YAML 1 MiB body", large_yaml(1_000_000), 422, "not_a_field", YAML),
        Poison("limit 501", "GET", "/api/v2/dags?limit=501", None, JSON, 400, "limit"),
        Poison("limit 0", "GET", "/api/v2/dags?limit=0", None, JSON, 400, "limit"),
        Poison("try 0", "GET", f"/api/v2/dags/{HEALTHY}/runs/r/tasks/a/logs?try=0", None, JSON, 400, "try"),
        Poison("try 2^31", "GET", f"/api/v2/dags/{HEALTHY}/runs/r/tasks/a/logs?try={2**31}", None, JSON, 400, "try"),
        Poison("log offset -1", "GET", f"{NO_RUN_LOGS}offset=-1", None, JSON, 400, "offset"),
        Poison("log offset 1 PB + 1", "GET", f"{NO_RUN_LOGS}offset={limits.LOG_BYTES_MAX + 1}", None, JSON, 400,
               "offset"),
        Poison("log length 0", "GET", f"{NO_RUN_LOGS}length=0", None, JSON, 400, "length"),
        Poison("log length 1 PB + 1", "GET", f"{NO_RUN_LOGS}length={limits.LOG_BYTES_MAX + 1}", None, JSON, 400,
               "length"),
        Poison("log tail 0", "GET", f"{NO_RUN_LOGS}tail=0", None, JSON, 400, "tail"),
        Poison("log tail with offset", "GET", f"{NO_RUN_LOGS}tail=5&offset=1", None, JSON, 400, "tail"),
        Poison("log container 64 chars", "GET", f"{NO_RUN_LOGS}container={'c' * 64}", None, JSON, 400,
               "container"),
        Poison("log container not a DNS label", "GET", f"{NO_RUN_LOGS}container=..%2Fetc", None, JSON, 400,
               "container"),
        # Small inputs that were 500s (issue 44, item 13): a 4xx naming the parameter.
        Poison("cursor of 2,000 nested [", "GET", f"/api/v2/dags?cursor={cursor_of(b'[' * 2_000)}", None, JSON, 400,
               "cursor"),
        Poison("cursor with a lone surrogate", "GET", "/api/v2/dags?cursor=" + cursor_of(b'["dags","\\ud800"]'), None,
               JSON, 400, "cursor"),
        Poison("version \u00b2 (isdigit, not int)", "GET", f"/api/v2/dags/{HEALTHY}/versions/%C2%B2", None, JSON, 404,
               "version"),
        Poison("backfill \u00b2", "GET", f"/api/v2/dags/{HEALTHY}/backfills/%C2%B2", None, JSON, 404, "backfill_id"),
        Poison("notification \u00b2 retried", "POST", "/api/v2/notifications/%C2%B2/retry", None, JSON, 404,
               "notification_id"),
        Poison("log cursor b\u00b2", "GET", f"{NO_RUN_LOGS}since=b%C2%B2", None, JSON,
               400, "since"),
        Poison("YAML key 1 on PATCH", "PATCH", f"/api/v2/dags/{HEALTHY}", b"paused: false\n1: x\n", YAML, 422, "1"),
        _run("YAML key 1 in conf", b"conf: {a: b, 1: x}\n", 422, "conf.1", YAML),
        Poison("YAML key 1 in a sync", "POST", "/api/v2/dags:sync", b"source: s\n1: x\nfiles: []\n", YAML, 422, "1"),
        # dags:sync holds all its files to one budget (issue 44, item 15): the second file is refused.
        Poison("20 alias-heavy files in one sync", "POST", "/api/v2/dags:sync", {"source": "poison", "files": [
            {"name": f"f{i:02}.yaml", "content": alias_sync_file(i)} for i in range(20)]}, JSON, 422, None),
        # Exactly at a limit: accepted.
        _dag("timeout exactly 30 days", spec("at-timeout", tasks=[task(timeout_seconds=30 * day)]), 201, ""),
        _dag("retry delays exactly 7 days", spec("at-delay", tasks=[task(retry_delay_seconds=7 * day,
                                                                         max_retry_delay_seconds=7 * day)]), 201, ""),
        _dag("retries exactly 1,000", spec("at-retries", default_retries=1_000), 201, ""),
        _dag("max_active_runs exactly 100,000", spec("at-active", max_active_runs=100_000), 201, ""),
        _dag("dag_id of exactly 50 characters", spec("d" * 50), 201, ""),
        _dag("start_date at the last second before 2200", spec("at-start", schedule="@yearly",
                                                                start_date="2199-12-31T23:59:59Z"), 201, ""),
        _dag("cron of exactly 256 characters", spec("at-cron", schedule="0 0 * *" + " " * 248 + "*"), 201, ""),
        _dag("cron firing every four years (29 February)", spec("at-leap", schedule="0 0 29 2 *"), 201, ""),
        _dag("a list of exactly 20 crons", spec("at-crons", schedule=[f"{m} * * * *" for m in range(20)]), 201, ""),
        _dag("every exactly 60 seconds", spec("at-every", schedule={"every": "1m"}), 201, ""),
        _dag("every exactly 366 days", spec("at-every-year", schedule={"every": "366d"}), 201, ""),
        _run("logical_date at the first second of 1970", {"logical_date": "1970-01-01T00:00:00Z"}, 201, ""),
        _dag("YAML aliases within every limit", _env_aliases(2, 30_000), 201, "", YAML),
        _dag("64 references in one string", spec("at-refs", tasks=[task(args=["{{ run.id }}" * 64])]), 201, ""),
        _run("conf of exactly 64 KiB", {"conf": conf_at_limit}, 201, ""),
        _run("conf nested exactly 32 deep", {"conf": nested(limits.CONF.max_depth)}, 201, ""),
        _run("run_id of exactly 250 characters", {"run_id": "r" * 250}, 201, ""),
        _dag("map_over exactly 10,000 items", spec("at-map-items", tasks=[task(
            map_over=list(range(limits.MAP_ITEMS.maximum)), max_parallel=limits.MAX_PARALLEL.maximum)]), 201, ""),
        _dag("map_over count exactly 10,000", spec("at-map-count", tasks=[task(
            map_over={"count": limits.MAP_ITEMS.maximum}, max_parallel=1, args=["{{ item }}", "{{ map_index }}"])]),
             201, ""),
        Poison("map_index exactly 9,999 (no such instance)", "GET",
               f"/api/v2/dags/{HEALTHY}/runs/{HEALTHY_RUN}/tasks/a?map_index={limits.MAP_ITEMS.maximum - 1}", None,
               JSON, 404, None),
        Poison("limit exactly 500", "GET", "/api/v2/dags?limit=500", None, JSON, 200, ""),
        Poison("limit exactly 1", "GET", "/api/v2/dags?limit=1", None, JSON, 200, ""),
        # A valid try number: validation passes, the run simply does not exist.
        Poison("try exactly 2^31 - 1", "GET", f"/api/v2/dags/{HEALTHY}/runs/r/tasks/a/logs?try={2**31 - 1}", None,
               JSON, 404, None),
        # Valid archive ranges: validation passes, the run simply does not exist.
        Poison("log offset exactly 1 PB", "GET", f"{NO_RUN_LOGS}offset={limits.LOG_BYTES_MAX}", None, JSON, 404, None),
        Poison("log offset exactly 0", "GET", f"{NO_RUN_LOGS}offset=0", None, JSON, 404, None),
        Poison("log length exactly 1", "GET", f"{NO_RUN_LOGS}length=1", None, JSON, 404, None),
        Poison("log tail exactly 1 PB", "GET", f"{NO_RUN_LOGS}tail={limits.LOG_BYTES_MAX}", None, JSON, 404, None),
        Poison("log container exactly 63 chars", "GET", f"{NO_RUN_LOGS}container={'c' * 63}", None, JSON, 404, None),
    ]
