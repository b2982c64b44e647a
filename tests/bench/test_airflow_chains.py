"""The pure parts of ``bench/vs_airflow.py --chain``: its arguments, the Airflow DAG file built
from bench/chain.py's chains, and the summary arithmetic. No Airflow here: the DAG file runs
against a stand-in ``airflow`` package that records what it builds (Airflow itself is only ever
installed by the benchmark, in its own virtualenv)."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from bench import airflow_chains, vs_airflow
from bench.chain import chain


class Recorder:
    """What the DAG file built: DAGs by id, each with its operators by task id."""

    def __init__(self) -> None:
        self.dags: dict[str, Any] = {}
        self.current: Any = None


def fake_airflow(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()

    class DAG:
        def __init__(self, dag_id: str, **kwargs: Any) -> None:
            self.dag_id, self.kwargs, self.tasks = dag_id, kwargs, {}
            recorder.dags[dag_id] = self

        def __enter__(self) -> DAG:
            recorder.current = self
            return self

        def __exit__(self, *exc: object) -> None:
            recorder.current = None

    class Operator:
        def __init__(self, task_id: str, **kwargs: Any) -> None:
            self.task_id, self.kwargs, self.upstream = task_id, kwargs, set()
            recorder.current.tasks[task_id] = self

        def __rshift__(self, other: Operator) -> Operator:
            other.upstream.add(self.task_id)
            return other

    class EmptyOperator(Operator):
        pass

    class BashOperator(Operator):
        pass

    modules = {"airflow": {"DAG": DAG}, "airflow.operators": {},
               "airflow.operators.bash": {"BashOperator": BashOperator},
               "airflow.operators.empty": {"EmptyOperator": EmptyOperator}}
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    return recorder


def test_the_airflow_dag_file_builds_bench_chain_py_chains_task_for_task(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = airflow_chains.chain_specs(7, 4)
    assert specs == [chain("empty-chain", 7, None), chain("true-chain", 4, ["true"])]
    recorder = fake_airflow(monkeypatch)
    exec(compile(airflow_chains.airflow_dag_file(specs), "bench_dags.py", "exec"), {})

    assert list(recorder.dags) == ["empty-chain", "true-chain"]
    for spec in specs:
        dag = recorder.dags[spec["dag_id"]]
        assert dag.kwargs["schedule"] is None and dag.kwargs["max_active_runs"] == spec["max_active_runs"] == 1
        assert list(dag.tasks) == [t["id"] for t in spec["tasks"]]
        for t in spec["tasks"]:
            operator = dag.tasks[t["id"]]
            assert operator.upstream == set(t["depends_on"])
            if t.get("kind") == "empty":
                assert type(operator).__name__ == "EmptyOperator" and operator.kwargs == {}
            else:
                assert type(operator).__name__ == "BashOperator" and operator.kwargs == {"bash_command": "true"}
    # A chain: one root, every other step waits on the one before it.
    assert [sorted(op.upstream) for op in recorder.dags["true-chain"].tasks.values()] == [[], ["s000"], ["s001"],
                                                                                          ["s002"]]


def test_the_airflow_runner_script_is_valid_python_polling_every_10_ms() -> None:
    tree = ast.parse(airflow_chains.AIRFLOW_CHAIN_RUNNER)
    sleeps = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "time.sleep"]
    assert [ast.unparse(s.args[0]) for s in sleeps] == ["0.01"]


def test_summary_is_the_p50_over_every_repeat_with_per_step_ms_and_the_airflow_over_leoflow_ratio() -> None:
    timed = {"empty-chain": {"airflow": ([9.0, 11.0, 10.0], [8.0, 9.5, 9.0]),
                             "leoflow": ([0.3, 0.2, 0.25], [0.01] * 3)},
             "true-chain": {"airflow": ([60.0, 80.0], [59.0, 79.0]), "leoflow": ([1.0, 3.0], [0.9, 2.9])}}
    table = airflow_chains.side_by_side(timed, {"empty-chain": 100, "true-chain": 40})

    empty = table["empty-chain"]
    assert empty["airflow"] == {"steps": 100, "repeats": 3, "p50_s": 10.0, "min_s": 9.0, "max_s": 11.0,
                                "db_p50_s": 9.0, "per_step_ms": 100.0, "runs_s": [9.0, 11.0, 10.0]}
    assert (empty["leoflow"]["p50_s"], empty["leoflow"]["per_step_ms"]) == (0.25, 2.5)
    assert empty["ratio_p50"] == 40.0
    true = table["true-chain"]
    assert (true["airflow"]["p50_s"], true["leoflow"]["p50_s"]) == (70.0, 2.0)  # even count: mean of the middle two
    assert (true["airflow"]["per_step_ms"], true["leoflow"]["per_step_ms"]) == (1750.0, 50.0)
    assert true["ratio_p50"] == 35.0
    with pytest.raises(ValueError, match="no timed runs"):
        airflow_chains.summarize([], [], 10)


def test_the_summary_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    timed = {"empty-chain": {"airflow": ([9.0], [8.0]), "leoflow": ([0.3], [0.01])},
             "true-chain": {"airflow": ([60.0], [59.0]), "leoflow": ([1.0], [0.9])}}
    png = tmp_path / "chain.png"
    airflow_chains.plot(airflow_chains.side_by_side(timed, {"empty-chain": 100, "true-chain": 40}), png)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_chain_arguments_and_their_defaults() -> None:
    fan = vs_airflow.parse_args([])
    assert not fan.chain and fan.plot.name == "vs_airflow.png" and (fan.rounds, fan.runs) == (2, 20)
    chained = vs_airflow.parse_args(["--chain", "--rounds", "1", "--repeats", "5", "--true-repeats", "2",
                                     "--empty-steps", "10", "--true-steps", "4"])
    assert chained.chain and chained.plot.name == "vs_airflow_chain.png"
    assert (chained.rounds, chained.repeats, chained.true_repeats, chained.empty_steps, chained.true_steps) == (
        1, 5, 2, 10, 4)


@pytest.mark.parametrize("flag", ["--rounds", "--repeats", "--true-repeats", "--empty-steps", "--true-steps"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_count_below_one_is_refused_naming_the_flag(flag: str, value: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        vs_airflow.parse_args(["--chain", flag, value])
    assert exit_info.value.code == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err
