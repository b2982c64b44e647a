"""Property: every DAG the SDK builds validates and equals the YAML a generator writes for the same DAG.

Hypothesis draws a DAG as plain data (tasks, edges, declared outputs, references to params and
to ancestors' outputs, maps over a literal list, a parameter, an output or a count, ``when:``
conditions, pod settings), then builds it twice: once through ``leoflow.sdk`` and once as YAML
text written field by field, read back by the server's YAML loader. The two mappings must be
equal, and the validator must accept both with the same canonical form and hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leoflow.model.files.yaml_loader import dump_yaml, load_yaml
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.sdk import DAG, Empty, Pod, Resources, Task, Toleration, item, map_index, run
from leoflow.sdk.refs import Ref

PARAMS = {"type": "object", "properties": {"day": {"type": "string", "default": "2026-01-01"},
                                           "regions": {"type": "array", "items": {"type": "string"},
                                                       "default": ["eu"]},
                                           "full": {"type": "boolean", "default": False}}}
IDS = st.from_regex(r"[a-z][a-z0-9]{0,5}(-[a-z0-9]{1,3})?", fullmatch=True)
WORDS = st.from_regex(r"[A-Za-z0-9_./=-]{1,12}", fullmatch=True)


@dataclass
class Node:
    id: str
    empty: bool
    deps: list[int]
    outputs: dict[str, str]
    #: ("text", s) | ("param", name) | ("output", task index, key) | ("item",) | ("index",)
    args: list[tuple[Any, ...]] = field(default_factory=list)
    map: tuple[Any, ...] | None = None
    max_parallel: int | None = None
    when: str | None = None
    retries: int | None = None
    node_selector: dict[str, str] | None = None
    tolerate: bool = False
    cpu: str | None = None


@st.composite
def dags(draw: st.DrawFn) -> list[Node]:
    ids = draw(st.lists(IDS, min_size=1, max_size=8, unique=True))
    nodes: list[Node] = []
    ancestors: list[set[int]] = []
    for i, task_id in enumerate(ids):
        deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        deps = draw(st.permutations(deps))
        above = set(deps).union(*(ancestors[d] for d in deps)) if deps else set()
        ancestors.append(above)
        node = Node(task_id, draw(st.booleans()) if i else False, list(deps),
                    draw(st.dictionaries(st.sampled_from(["files", "n", "uri"]), st.sampled_from(["array", "integer",
                                                                                                   "string"]),
                                         max_size=2)))
        nodes.append(node)
        if node.empty:
            node.outputs = {}
            continue
        readable = [(a, k) for a in sorted(above) for k in nodes[a].outputs]
        choices: list[st.SearchStrategy[tuple[Any, ...]]] = [
            st.tuples(st.just("text"), WORDS), st.tuples(st.just("param"), st.sampled_from(["day", "full"]))]
        if readable:
            choices.append(st.sampled_from([("output", a, k) for a, k in readable]))
        lists: list[tuple[Any, ...]] = [("output", a, k) for a, k in readable if nodes[a].outputs[k] == "array"]
        kinds: list[str | None] = [None, "items", "param", "count", *(["output"] if lists else [])]
        mapping = draw(st.sampled_from(kinds))
        if mapping is not None:
            if mapping == "items":
                node.map = ("items", draw(st.lists(WORDS, min_size=1, max_size=3)))
            elif mapping == "param":
                node.map = ("param", "regions")
            elif mapping == "count":
                node.map = ("count", draw(st.integers(1, 50)))
            else:
                node.map = draw(st.sampled_from(lists))
            node.max_parallel = draw(st.none() | st.integers(1, 8))
            choices += [st.just(("item",)), st.just(("index",))]
        node.args = draw(st.lists(st.one_of(*choices), max_size=4))
        if draw(st.booleans()):
            counts = [f"size({_cel_task(nodes[a].id)}.outputs.{k}) > 0" for a, k in readable
                      if nodes[a].outputs[k] == "array"]
            node.when = draw(st.sampled_from(["params.full", 'params.day != "2026-12-25"', *counts]))
        node.retries = draw(st.none() | st.integers(0, 5))
        node.node_selector = draw(st.none() | st.dictionaries(st.sampled_from(["pool", "disk"]),
                                                              st.sampled_from(["etl", "ssd"]), min_size=1))
        node.tolerate = draw(st.booleans())
        node.cpu = draw(st.none() | st.sampled_from(["100m", "1", "2500m"]))
    return nodes


def _cel_task(task_id: str) -> str:
    """A task in CEL: ``tasks.extract``, or ``tasks["load-data"]`` when the id is not an identifier."""
    return f"tasks.{task_id}" if "-" not in task_id else f'tasks["{task_id}"]'


def _ref_text(node_ids: list[str], ref: tuple[Any, ...]) -> str:
    kind = ref[0]
    if kind == "text":
        return str(ref[1])
    if kind == "param":
        return "{{ params." + str(ref[1]) + " }}"
    if kind == "item":
        return "{{ item }}"
    if kind == "index":
        return "{{ map_index }}"
    task_id = node_ids[ref[1]]
    name = f"tasks.{task_id}" if "-" not in task_id else f'tasks["{task_id}"]'
    return "{{ " + f"{name}.outputs.{ref[2]}" + " }}"


#: Exit tasks: (id, indexes of earlier exit tasks it depends on); each reports the run's state.
Exits = list[tuple[str, list[int]]]


@st.composite
def exit_tasks(draw: st.DrawFn) -> Exits:
    ids = draw(st.lists(st.from_regex(r"exit[0-9]", fullmatch=True), max_size=3, unique=True))
    return [(task_id, sorted(draw(st.sets(st.integers(0, i - 1), max_size=2))) if i else [])
            for i, task_id in enumerate(ids)]


def generator_yaml(dag_id: str, nodes: list[Node], exits: Exits = ()) -> str:  # type: ignore[assignment]
    """The YAML a person (or a template engine) writes for the DAG: built field by field, as text."""
    ids = [n.id for n in nodes]
    tasks = []
    for node in nodes:
        task: dict[str, Any] = {"id": node.id}
        if node.empty:
            task["kind"] = "empty"
        else:
            task["image"] = "busybox:1.36"
            task["command"] = ["run"]
            if node.args:
                task["args"] = [_ref_text(ids, a) for a in node.args]
            if node.cpu:
                task["resources"] = {"requests": {"cpu": node.cpu}}
            if node.outputs:
                task["outputs"] = {k: {"type": v} for k, v in node.outputs.items()}
        if node.deps:
            task["depends_on"] = [ids[d] for d in node.deps]
        if node.map is not None:
            kind = node.map[0]
            task["map_over"] = (list(node.map[1]) if kind == "items" else "{{ params.regions }}" if kind == "param"
                                else {"count": node.map[1]} if kind == "count" else _ref_text(ids, node.map))
            if node.max_parallel is not None:
                task["max_parallel"] = node.max_parallel
        if node.when is not None:
            task["when"] = node.when
        if node.retries is not None:
            task["retries"] = node.retries
        if node.node_selector:
            task["node_selector"] = node.node_selector
        if node.tolerate:
            task["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
        tasks.append(task)
    doc: dict[str, Any] = {"dag_id": dag_id, "params": PARAMS, "tasks": tasks}
    if exits:
        doc["on_exit"] = [{"id": task_id, "image": "curlimages/curl:8.10.1", "args": ["-d", "{{ run.state }}"],
                           **({"depends_on": [exits[d][0] for d in deps]} if deps else {})}
                          for task_id, deps in exits]
    return dump_yaml(doc)


def sdk_dag(dag_id: str, nodes: list[Node], exits: Exits = ()) -> DAG:  # type: ignore[assignment]
    with DAG(dag_id, params=PARAMS) as dag:
        made: list[Task] = []

        def ref(r: tuple[Any, ...]) -> str | Ref:
            kind = r[0]
            if kind == "text":
                return str(r[1])
            if kind == "param":
                return dag.params[r[1]]
            if kind == "item":
                return item
            if kind == "index":
                return map_index
            output: Ref = made[r[1]].outputs[r[2]]
            return output

        for node in nodes:
            if node.empty:
                task = Empty(node.id)
            else:
                pod = None
                if node.node_selector or node.tolerate:
                    pod = Pod(node_selector=node.node_selector or None,
                              tolerations=[Toleration(key="dedicated", operator="Exists", effect="NoSchedule")]
                              if node.tolerate else None)
                task = Task(node.id, image="busybox:1.36", command=["run"],
                            args=[ref(a) for a in node.args] or None,
                            resources=Resources(requests={"cpu": node.cpu}) if node.cpu else None,
                            outputs=node.outputs or None, when=node.when, retries=node.retries, pod=pod)
            for d in node.deps:
                made[d] >> task
            if node.map is not None:
                kind = node.map[0]
                if kind == "count":
                    task.map(count=node.map[1], max_parallel=node.max_parallel)
                else:
                    over: Any = (list(node.map[1]) if kind == "items" else dag.params.regions if kind == "param"
                                 else ref(node.map))
                    task.map(over=over, max_parallel=node.max_parallel)
            made.append(task)
        with dag.exit_handlers():
            handlers: list[Task] = []
            for task_id, deps in exits:
                handler = Task(task_id, image="curlimages/curl:8.10.1", args=["-d", run.state])
                [handlers[d] for d in deps] >> handler
                handlers.append(handler)
    return dag


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), exit_tasks())
def test_every_sdk_dag_validates_and_equals_the_generators_yaml(nodes: list[Node], exits: Exits) -> None:
    dag = sdk_dag("prop", nodes, exits)
    written = load_yaml(generator_yaml("prop", nodes, exits))
    built = dag.to_spec()
    assert built == written
    ours, theirs = parse_dag_spec(built), parse_dag_spec(written)
    assert ours.to_canonical() == theirs.to_canonical()
    assert ours.spec_hash() == theirs.spec_hash()
    assert load_yaml(dag.to_yaml()) == written


def test_the_comparison_sees_a_difference_the_sdk_makes() -> None:
    """The property is not vacuous: a read of a non-ancestor's output adds an edge the generator did not write."""
    nodes = [Node("a", False, [], {"files": "array"}), Node("b", False, [], {}, args=[("output", 0, "files")])]
    built = sdk_dag("diff", nodes).to_spec()
    assert built != load_yaml(generator_yaml("diff", nodes))
    assert built["tasks"][1]["depends_on"] == ["a"]
