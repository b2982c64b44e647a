"""Delivery of Python DAG files: ``dags render`` and ``dags sync`` run them in a child process, all or nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN_TOKEN, api_settings
from tests.api.live import serve
from tests.dag_files.test_sync import cli, live_dags, write

GOOD = textwrap.dedent("""\
    from leoflow.sdk import DAG, Task, item

    for region in ("eu", "us"):
        with DAG(f"etl-{region}") as dag:
            listing = Task("list", image="tools:2", command=["list", region], outputs={"parts": "array"})
            Task("process", image="etl:5", args=[item]).map(over=listing.outputs.parts)
    """)


@pytest.fixture
def api(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    with serve(create_app(api_settings(database_url))) as url, httpx.Client(base_url=url, timeout=60) as client:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        monkeypatch.delenv("LEOFLOW_DAGS_SOURCE", raising=False)
        yield client


def test_render_prints_every_dag_a_file_makes_even_in_a_loop(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, {"etl.py": GOOD}) / "etl.py"
    code, out, err = cli(capsys, "dags", "render", str(path), "--output", "json")
    assert (code, err) == (0, [])
    specs = json.loads("\n".join(out))
    assert [s["dag_id"] for s in specs] == ["etl-eu", "etl-us"]
    assert specs[0]["tasks"][1] == {"id": "process", "image": "etl:5", "args": ["{{ item }}"], "depends_on": ["list"],
                                    "map_over": "{{ tasks.list.outputs.parts }}"}


@pytest.mark.parametrize(("source", "expected"), [
    ("import json\nx = {}\nx['missing']\n", "bad.py:3: raised KeyError: 'missing'"),
    ("from leoflow.sdk import DAG, Task\nwith DAG('d'):\n    Task('t')\n",
     "bad.py:3: tasks[0].image: is required (or set kind: empty)"),
    ("import sys\nprint('debugging')\nfrom leoflow.sdk import DAG, Task\nwith DAG('d'):\n    Task('t', image='x')\n",
     "bad.py:2: wrote to standard output (render prints the specs there); log to sys.stderr instead"),
    ("import time\nwhile True:\n    time.sleep(0.01)\n",
     "bad.py:3: did not finish within 2 s (a loop, or waiting on the network?): nothing was rendered"),
    ("import sys\nsys.exit(3)\n", "bad.py:2: called sys.exit(3) while being rendered"),
    ("def f(:\n", "bad.py:1: invalid Python: invalid syntax"),
    ("x = 1\n", "bad.py: defines no DAG (make one with leoflow.sdk.DAG)"),
])
def test_a_file_that_raises_loops_prints_or_is_invalid_is_one_located_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, expected: str) -> None:
    write(tmp_path, {"bad.py": source})
    code, out, err = cli(capsys, "dags", "render", str(tmp_path / "bad.py"), "--timeout", "2")
    assert (code, out) == (1, [])
    assert err == [f"leoflow: error: {expected}".replace("bad.py", str(tmp_path / "bad.py"))]


def test_sync_applies_python_and_yaml_files_together_and_nothing_when_one_py_file_is_bad(
        api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo", {
        "etl.py": GOOD,
        "plain.yaml": "dag_id: plain\ntasks:\n  - id: t\n    image: busybox:1.36\n    command: ['true']\n",
        "lib/helpers.py": "PREFIX = 'x'\n",  # a helper module: makes no DAG, not an error
    })
    code, out, err = cli(capsys, "dags", "sync", str(repo), "--source", "py")
    assert (code, err) == (0, []), err
    assert set(live_dags(api)) == {"etl-eu", "etl-us", "plain"}
    assert any(line.startswith("created") and "etl.py" in line for line in out)

    # One .py file that loops forever: nothing changes, the others are still checked.
    write(repo, {"plain.yaml": "dag_id: plain\ntasks:\n  - id: t\n    image: busybox:1.36\n    command: ['false']\n",
                 "stuck.py": "while True: pass  # one line: wherever the deadline lands, it is line 1\n"})
    code, out, err = cli(capsys, "dags", "sync", str(repo), "--source", "py", "--timeout", "6")
    assert code == 1
    assert err == ["leoflow: error: stuck.py:1:1: did not finish within 6 s (a loop, or waiting on the network?): "
                   "nothing was rendered",
                   "leoflow: error: 1 problem(s) in 1 file(s); nothing was changed"]
    assert live_dags(api)["plain"]["version"] == 1

    # A problem only the server can see (the same dag_id in a YAML file) names the Python line.
    (repo / "stuck.py").unlink()
    write(repo, {"dup.yaml": "dag_id: etl-eu\ntasks:\n  - id: t\n    image: busybox:1.36\n"})
    code, out, err = cli(capsys, "dags", "sync", str(repo), "--source", "py")
    assert code == 1
    assert err == ["leoflow: error: etl.py:4:1: document 0: dag_id: DAG 'etl-eu' is also defined in dup.yaml",
                   "leoflow: error: 1 problem(s) in 1 file(s); nothing was changed"]
    assert live_dags(api)["plain"]["version"] == 1


def test_the_sdk_imports_nothing_of_the_server() -> None:
    probe = ("import sys, leoflow.sdk\n"
             "from leoflow.sdk import DAG, Task\n"
             "with DAG('d') as d:\n    Task('t', image='x')\n"
             "d.to_spec()\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('leoflow', 'sqlalchemy', 'psycopg', "
             "'starlette', 'kubernetes', 'httpx', 'uvicorn')))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True).stdout.replace("'", '"'))
    server = [m for m in loaded if not m.startswith(("leoflow.sdk", "leoflow.model", "leoflow.errors"))
              and m != "leoflow"]
    assert server == [], server
    assert "leoflow.model.spec.dag" in loaded  # validated by the server's own validator, imported as a pure model


@pytest.mark.parametrize(("argv", "expected"), [
    (["--timeout", "-1"], "--timeout must be more than 0 and at most 3600 seconds, got -1"),
    (["--timeout", "nan"], "--timeout must be more than 0 and at most 3600 seconds, got nan"),
    (["--timeout", "3601"], "--timeout must be more than 0 and at most 3600 seconds, got 3601"),
])
def test_bad_render_arguments_are_usage_errors_naming_the_flag_or_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    path = write(tmp_path, {"etl.py": GOOD}) / "etl.py"
    assert cli(capsys, "dags", "render", str(path), *argv) == (2, [], [f"leoflow: error: {expected}"])
    assert cli(capsys, "dags", "sync", str(tmp_path), *argv) == (2, [], [f"leoflow: error: {expected}"])
    yaml_file = write(tmp_path, {"etl.yaml": "dag_id: x\n"}) / "etl.yaml"
    assert cli(capsys, "dags", "render", str(yaml_file))[2] == [
        f"leoflow: error: {yaml_file}: render takes Python DAG files (*.py); YAML files are specs already"]
    assert cli(capsys, "dags", "render", str(tmp_path / "missing.py"))[2] == [
        f"leoflow: error: {tmp_path / 'missing.py'}: no such file"]


def test_many_files_render_in_forked_children_each_isolated_and_under_its_own_deadline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {"a_good.py": GOOD, "b_loop.py": "import time\nwhile True:\n    time.sleep(0.01)\n",
             "c_print.py": "import os\nos.write(1, b'raw')\n", "d_raise.py": "import json\njson.loads('{')\n",
             # A module-level side effect of one file is not seen by the next (each child starts afresh).
             "e_state.py": "import leoflow.sdk.dag as d\nassert not d.made_dags(), 'leaked'\n"
                           "from leoflow.sdk import DAG, Task\nwith DAG('e'):\n    Task('t', image='x')\n"}
    write(tmp_path, files)
    code, out, err = cli(capsys, "dags", "render", *(str(tmp_path / n) for n in files), "--timeout", "3")
    assert (code, out) == (1, [])
    shown = [e.replace(str(tmp_path) + "/", "") for e in err]
    assert shown == [
        "leoflow: error: b_loop.py:3: did not finish within 3 s (a loop, or waiting on the network?): "
        "nothing was rendered",
        "leoflow: error: c_print.py: wrote to standard output (render prints the specs there): b'raw'; "
        "log to sys.stderr instead",
        "leoflow: error: d_raise.py:2: raised JSONDecodeError: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
    ]
    code, out, err = cli(capsys, "dags", "render", str(tmp_path / "a_good.py"), str(tmp_path / "e_state.py"))
    assert (code, err) == (0, []) and out.count("---") == 2  # etl-eu, etl-us, e


def test_sync_of_one_python_file_sends_its_specs_only(api: httpx.Client, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, {"etl.py": GOOD}) / "etl.py"
    code, _, err = cli(capsys, "dags", "sync", str(path), "--source", "one")
    assert (code, err) == (0, []), err
    assert set(live_dags(api)) == {"etl-eu", "etl-us"}


def test_a_file_imports_helpers_from_its_directory_and_the_synced_root(tmp_path: Path) -> None:
    from leoflow.sdk.render import render_files

    root = write(tmp_path, {
        "common.py": "IMAGE = 'busybox:1.36'\n",
        "team/naming.py": "def dag_id(x):\n    return 'team-' + x\n",
        "team/etl.py": "from common import IMAGE\nfrom naming import dag_id\nfrom leoflow.sdk import DAG, Task\n"
                       "with DAG(dag_id('etl')):\n    Task('t', image=IMAGE)\n",
    })
    [rendered] = render_files([("team/etl.py", root / "team" / "etl.py")], root=root)
    assert rendered.problems == ()
    assert [d.spec for d in rendered.dags] == [{"dag_id": "team-etl", "tasks": [{"id": "t", "image": "busybox:1.36"}]}]
