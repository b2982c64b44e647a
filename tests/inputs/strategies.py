"""Hypothesis strategies: valid DAG specs, mutated ones, odd values, and trigger bodies.

Valid specs stay inside every limit of :mod:`leoflow.model.limits` (small: a handful of tasks)
and satisfy the rules no schema states (acyclic dependencies on earlier tasks, crons that fire,
existing time zones). Mutations replace, drop or add one field anywhere in a valid spec with a
value drawn from :func:`odd_values` — wrong types, numbers at and past every edge (NaN,
infinities, 10^5000, -0.0), NUL characters and lone surrogates, bytes, dates, sets, tuples and
values nested far deeper than any limit.
"""

from __future__ import annotations

import copy
import string
from datetime import UTC, date, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from leoflow.model import limits

NAMES = st.from_regex(limits.NAME_RE, fullmatch=True)
RUN_IDS = st.from_regex(limits.RUN_ID_RE, fullmatch=True)
ENV_NAMES = st.from_regex(r"^[A-Za-z_][A-Za-z0-9_]{0,20}$", fullmatch=True).filter(
    lambda n: not n.upper().startswith("LEOFLOW_"))
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
CRONS = st.sampled_from([None, "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "*/5 * * * *",
                         "0 3 * * 1-5", "30 2 1,15 * *", "0 12 * 6 0"])  # every one fires yearly
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"])
QUANTITIES = st.one_of(st.from_regex(r"^[0-9]{1,6}(\.[0-9]{1,3})?(m|Mi|Gi|k)?$", fullmatch=True),
                       st.integers(0, 10**6), st.integers(0, 10**9).map(lambda n: n / 1000))
#: Past Python's 4,300-digit ``str()`` limit (built on demand: Hypothesis prints a strategy's
#: elements, and these do not print).
BIG_INTS = st.sampled_from([5_000, -400]).map(lambda e: 10**e if e > 0 else -(10**-e))
MOMENTS = st.datetimes(datetime(1970, 1, 2), datetime(2199, 12, 30), timezones=st.just(UTC))


def numbers(limit: limits.Range) -> st.SearchStrategy[float]:
    if limit.integer:
        return st.integers(int(limit.minimum), int(limit.maximum))
    return st.floats(limit.minimum, limit.maximum, exclude_min=limit.above_minimum, allow_nan=False)


@st.composite
def tasks(draw: st.DrawFn, task_id: str, earlier: list[str]) -> dict[str, Any]:
    task: dict[str, Any] = {"id": task_id}
    if earlier and draw(st.booleans()):
        task["depends_on"] = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=4))
    if draw(st.integers(0, 4)) == 0:
        task["kind"] = "empty"
    else:
        task["image"] = draw(TEXT.filter(bool))
        task["command"] = draw(st.lists(TEXT, min_size=1, max_size=4))
        if draw(st.booleans()):
            task["args"] = draw(st.lists(TEXT, max_size=4))
        if draw(st.booleans()):
            task["env"] = draw(st.dictionaries(ENV_NAMES, TEXT, max_size=4))
        if draw(st.booleans()):
            group = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITIES, max_size=3)
            task["resources"] = draw(st.fixed_dictionaries({}, optional={"requests": group, "limits": group}))
    for field, limit in (("retries", limits.RETRIES), ("retry_delay_seconds", limits.RETRY_DELAY),
                         ("max_retry_delay_seconds", limits.MAX_RETRY_DELAY), ("timeout_seconds", limits.TIMEOUT)):
        if draw(st.booleans()):
            task[field] = draw(numbers(limit))
    return task


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    spec: dict[str, Any] = {"dag_id": draw(NAMES), "tasks": [draw(tasks(t, ids[:i])) for i, t in enumerate(ids)]}
    optional = {
        "description": TEXT, "schedule": CRONS, "timezone": ZONES, "catchup": st.booleans(),
        "start_date": MOMENTS.map(lambda m: m.isoformat()), "max_active_runs": numbers(limits.MAX_ACTIVE_RUNS),
        "paused": st.booleans(), "default_retries": numbers(limits.RETRIES),
    }
    for field, strategy in optional.items():
        if draw(st.booleans()):
            spec[field] = draw(strategy)
    return spec


def _deep(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def odd_values(huge: bool = True) -> st.SearchStrategy[Any]:
    """Anything a decoder (or a careless caller) could hand a validator; ``huge=False`` leaves out
    the values nested thousands deep or 20,000 wide (slow to send over HTTP; the API corpus has them)."""
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.sampled_from([2**63, -1, 0]),
        BIG_INTS,
        st.floats(), st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324]),
        st.text(), st.sampled_from(["\x00", "\ud800", "0 0 31 2 *", "../../etc/passwd", "9999-12-31"]),
        st.just(70_000).map(lambda n: "a" * n),
        st.binary(max_size=20), st.dates(), st.datetimes(), st.just(timedelta(days=1)),
        st.sampled_from([date.max, datetime.max, datetime.min]),
    )
    keys = st.one_of(st.text(max_size=8), st.integers(), BIG_INTS, st.tuples(BIG_INTS))
    nested = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4),
        st.frozensets(st.integers(), max_size=3), st.tuples(inner, inner)), max_leaves=12)
    # Built on demand: Hypothesis prints a strategy's elements, and these do not print.
    large = st.one_of(st.sampled_from([40, 2_000]).map(_deep), st.just(20_000).map(lambda n: [0] * n),
                     st.just(20_000).map(lambda n: {str(i): i for i in range(n)}))
    return st.one_of(nested, large) if huge else nested


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@st.composite
def mutated_specs(draw: st.DrawFn, huge: bool = True) -> Any:
    """A valid spec with one place replaced, dropped or joined by an unknown key — or not a spec at all."""
    spec = copy.deepcopy(draw(valid_specs()))
    if draw(st.integers(0, 9)) == 0:
        return draw(odd_values(huge))
    path = draw(st.sampled_from(_paths(spec)))
    if not path:
        return draw(odd_values(huge))
    parent: Any = spec
    for step in path[:-1]:
        parent = parent[step]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[path[-1]] = draw(odd_values(huge))
    elif action == "drop":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.one_of(st.text(string.ascii_lowercase, max_size=8), odd_values(huge).filter(_hashable)))] = \
            draw(odd_values(huge))
    else:
        parent.append(draw(odd_values(huge)))
    return spec


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def run_requests(huge: bool = True) -> st.SearchStrategy[Any]:
    """Trigger bodies: valid ones, odd fields, odd values and not-an-object at all."""
    conf = st.one_of(st.none(), st.dictionaries(st.text(max_size=10), odd_values(huge), max_size=4), odd_values(huge))
    body = st.fixed_dictionaries({}, optional={"run_id": st.one_of(RUN_IDS, odd_values(huge)), "conf": conf})
    return st.one_of(st.none(), body, body.flatmap(lambda b: st.dictionaries(
        st.text(max_size=8), odd_values(huge), max_size=2).map(lambda extra: {**b, **extra})), odd_values(huge))
