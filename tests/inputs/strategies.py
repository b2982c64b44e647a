"""Hypothesis strategies: valid DAG specs, mutated ones, odd values, and trigger bodies.

Valid specs stay inside every limit of :mod:`leoflow.model.limits` (small: a handful of tasks)
and satisfy the rules no schema states (acyclic dependencies on earlier tasks, crons that fire,
existing time zones). Mutations replace, drop or add one field anywhere in a valid spec with a
value drawn from :func:`odd_values` — wrong types, numbers at and past every edge (NaN,
infinities, 10^5000, -0.0), NUL characters and lone surrogates, bytes, dates, sets, tuples and
values nested far deeper than any limit.

:func:`hostile_parameters` and :func:`hostile_yaml_bodies` are what a URL or a YAML body can carry
past a careless parser (issue 44, item 13): digits that are not ASCII (``'²'`` passes
``str.isdigit()``, ``'٣'`` passes ``int()``), cursors nesting 2,000 deep or carrying a lone
surrogate, dates in year 1 or 9999, keys that are not strings.
"""

from __future__ import annotations

import base64
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


# --------------------------------------------------------------------------- URLs and YAML bodies

#: Digits that are not ASCII: superscripts pass ``str.isdigit()`` (and fail ``int()``), the others
#: pass ``int()`` and ``float()`` too.
UNICODE_DIGITS = ["\u00b2", "\u00b9\u00b2", "\u0663", "\u06f7", "\u0967", "\uff13", "\U0001d7d7", "\u216b",
                  "\u00bd"]  # ² ¹² ٣ (Arabic-Indic 3), Persian 7, Devanagari 1, fullwidth 3, bold 9, Ⅻ, ½
EXTREME_DATES = ["0001-01-01", "0001-01-01T00:00:00+14:00", "9999-12-31", "9999-12-31T23:59:59-12:00",
                 "1969-12-31T23:59:59Z", "2200-01-01T00:00:00Z", "2026-02-30", "2026-13-01", "-2026-01-01"]


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def hostile_parameters() -> st.SearchStrategy[str]:
    """Values for any path or query parameter, each one a way a parser has failed somewhere."""
    cursors = st.sampled_from([
        _cursor(b"[" * 2_000), _cursor(b"[" * 700), _cursor(b"{" * 700), _cursor(b'["dags","\\ud800"]'),
        _cursor(b'["tasks","\\udfff"]'), _cursor(b'["runs",1e999]'), _cursor(b'["runs",-1]'),
        _cursor(b'["runs",' + b"9" * 400 + b"]"), _cursor(b'["dags","a\\u0000"]'), _cursor(b"\xff\xfe"),
        _cursor(b'["dags",' + b'"x",' * 500 + b'"x"]'), "A" * 5_000,
    ])
    numbers = st.sampled_from(["-1", "0", "+1", " 1", "1 ", "1_0", "1e3", "0x10", "nan", "inf", "-inf", "1e309",
                               "9" * 19, "9" * 400, "2147483648", "9223372036854775808", "0.5", ""])
    texts = st.sampled_from(["\x00", "a\x00b", "\n", "\ud800", "\udfff", "a" * 5_000, "[" * 2_000, "%", "../..",
                             "scheduled__2026-01-01T00:00:00+00:00", "b1", "t2026-01-01T00:00:00Z"])
    mixed = st.builds(lambda d, p: p + d, st.sampled_from(UNICODE_DIGITS), st.sampled_from(["", "b", "1", "t"]))
    return st.one_of(st.sampled_from(UNICODE_DIGITS), mixed, cursors, numbers, texts, st.sampled_from(EXTREME_DATES),
                     st.text(max_size=20))


def hostile_yaml_bodies() -> st.SearchStrategy[str]:
    """YAML bodies for any write route: keys of every type, extreme dates, deep nesting."""
    keys = st.sampled_from(["1", "-1", "1.5", "true", "on", "yes", "~", "2026-01-01", "0777", "1:20", "[a]", "{a: b}",
                            "? [1, 2]"])
    mixed_keys = st.builds(lambda k, field: f"{field}: x\n{k}: x\n" if not k.startswith("?") else f"{k}\n: x\n",
                           keys, st.sampled_from(["paused", "state", "tasks", "conf", "source", "start", "name"]))
    nested_keys = keys.map(lambda k: f"conf: {{a: {{{k}: x}}, b: 1}}\n" if not k.startswith("?") else "conf: {}\n")
    dates = st.builds(lambda a, b: f"start: {a}\nend: {b}\n", st.sampled_from(EXTREME_DATES),
                      st.sampled_from(EXTREME_DATES))
    deep = st.sampled_from(["[" * 2_000 + "]" * 2_000, "conf: " + "{a: " * 2_000 + "x" + "}" * 2_000,
                            "a: &a [*a]\n", "tasks: [" * 70 + "]" * 70])
    return st.one_of(mixed_keys, nested_keys, dates, deep)
