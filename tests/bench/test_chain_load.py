"""``bench/chain.py``'s load row: the median of ``--load-repeats`` runs, and its arguments."""

from __future__ import annotations

import pytest

from bench import chain


def run(p99: float, tasks_per_second: float) -> dict[str, float]:
    return {"latency_p50_s": p99 / 2, "latency_p99_s": p99, "join_latency_p50_s": p99, "join_latency_p99_s": p99,
            "tasks_per_second": tasks_per_second, "wall_seconds": 20.0}


def test_the_load_row_is_the_median_run_by_p99_with_every_run_beside_it() -> None:
    row = chain.median_run("--runs 10", [run(0.120, 6000), run(0.090, 7000), run(0.101, 6500)])
    assert row["latency_p99_s"] == 0.101 and row["tasks_per_second"] == 6500  # one run's figures, not a mix
    assert row["latency_p50_s"] == 0.101 / 2
    assert row["each_latency_p99_s"] == [0.120, 0.090, 0.101] and row["each_tasks_per_second"] == [6000, 7000, 6500]
    assert (row["repeats"], row["args"]) == (3, "--runs 10")


def test_an_even_count_takes_the_upper_median_and_one_run_is_itself() -> None:
    assert chain.median_run("", [run(0.09, 1), run(0.12, 2), run(0.10, 3), run(0.11, 4)])["latency_p99_s"] == 0.11
    assert chain.median_run("", [run(0.2, 5)])["latency_p99_s"] == 0.2


def test_the_load_runs_three_times_by_default() -> None:
    assert chain.parse_args([]).load_repeats == 3
    assert chain.parse_args(["--load-repeats", "5"]).load_repeats == 5


@pytest.mark.parametrize("flag", ["--load-repeats", "--repeats", "--true-repeats", "--shape-repeats",
                                  "--empty-steps", "--true-steps"])
def test_a_count_below_one_is_refused_naming_the_flag(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        chain.parse_args([flag, "0"])
    assert exit_info.value.code == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err
