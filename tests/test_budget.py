"""The per-replica connection budget: LEOFLOW_DB_POOL_SIZE split between API, leader work and LISTEN."""

from __future__ import annotations

import pytest

from leoflow.db.connection.budget import MINIMUM_POOL_SIZE, ConnectionBudget


def test_every_budget_adds_up_and_gives_each_part_what_it_needs() -> None:
    for pool_size in range(MINIMUM_POOL_SIZE, 1001):  # every value LEOFLOW_DB_POOL_SIZE accepts
        budget = ConnectionBudget.split(pool_size)
        assert budget.total == budget.api + budget.background + budget.listener == pool_size
        assert budget.api >= 1 and budget.listener == 1
        assert 2 <= budget.background <= 8


def test_the_default_budget() -> None:
    assert ConnectionBudget.split(10) == ConnectionBudget(api=6, background=3, listener=1)


def test_a_budget_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        ConnectionBudget.split(MINIMUM_POOL_SIZE - 1)
