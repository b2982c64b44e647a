"""``bench/run_starts.py``: what it seeds and measures, and the arguments it refuses."""

from __future__ import annotations

import pytest

from bench import run_starts


def test_it_times_the_call_at_each_backlog_and_says_whether_the_targets_hold(database_url: str) -> None:
    summary = run_starts.measure(database_url, [0, 300], reps=3)
    assert list(summary["p50_ms"]) == list(summary["p99_ms"]) == ["queued_0", "queued_300"]
    assert all(0 < summary["p50_ms"][size] <= summary["p99_ms"][size] for size in summary["p50_ms"])
    assert set(summary["targets"]) == {"largest_backlog_p50<5ms", "largest_backlog_p50_at_most_2ms_above_smallest"}


@pytest.mark.parametrize(("argv", "message"), [(["--reps", "0"], "--reps must be at least 1"),
                                               (["--backlog", "0", "-1"], "--backlog: each size must be")])
def test_a_bad_count_is_refused_naming_the_flag(argv: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_starts.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
