"""The JSON Schema validator a DAG's ``params`` run with: RE2 regular expressions and a work budget.

A ``params`` schema is code a DAG author writes and every trigger (and, for a scheduled DAG's
defaults, the leader) runs against input. jsonschema's stock draft 2020-12 validator is not
safe for that: its ``pattern``, ``patternProperties`` and ``additionalProperties`` call
Python's backtracking :mod:`re` (``^(a+)+$`` against 28 ``a`` and a ``!`` holds the GIL for
seconds, and no timeout can interrupt it), and ``uniqueItems`` compares unhashable items pair
by pair (quadratic). :data:`ParamsValidator` is that validator with:

- every regular expression compiled and run by RE2 (``google-re2``), whose matching time is
  linear in the text; a pattern RE2 cannot run (backreferences, lookaround) is refused when the
  DAG is applied (:func:`compile_pattern`, called by :mod:`leoflow.model.spec.params`). RE2's program
  size is capped (:data:`REGEX_MAX_MEM`) so a compiled pattern is small too;
- ``uniqueItems`` and ``enum`` by hashing a canonical form of each value (linear, where the
  stock ones compare pairs: 1,000 items against an ``enum`` of 3,000 took 2.5 s, 3,000
  distinct objects under ``uniqueItems`` 13 s);
- ``format`` asserted, with the linear checkers of :mod:`leoflow.model.spec.params_formats`
  (:data:`FORMATS`), each charged by the string's length;
- a budget of :data:`MAX_STEPS` steps per validation (:func:`first_error`): every keyword
  evaluated costs one step, an error it reports two, ``uniqueItems`` one per item, a regular
  expression search ``len(text) * program size / 1000``. Whatever the schema's shape (``anyOf`` nested in
  ``unevaluatedProperties`` re-evaluates branches), validation stops with :class:`TooCostly`
  instead of running on.

jsonschema (4.x) has no supported hook for the regex engine (python-jsonschema/jsonschema#1142),
so the keywords that use one are replaced through :func:`jsonschema.validators.extend`. The one
place left that still calls :mod:`re` on a schema's patterns, ``unevaluatedProperties`` looking
through ``patternProperties``, is refused at apply time by :mod:`leoflow.model.spec.params`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import re2
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import extend

from leoflow.model.spec.params_formats import format_checker

#: Steps one validation may take (see the module doc). A step is about 5 µs of CPU (a keyword
#: with its ``descend``), so this is about half a second; a conf at the limits (10,000 entries)
#: checked by a schema of two or three keywords per entry uses about 30,000.
MAX_STEPS = 100_000
#: Steps an error costs: building one (and its place in the best-match ranking) costs about
#: twice a keyword (``anyOf`` over failing branches is mostly errors).
_ERROR_STEPS = 2
#: RE2's memory budget per pattern (bytes): it bounds the compiled program (a few thousand
#: instructions), and with it the cost of a search, to about 1 µs per character of text.
REGEX_MAX_MEM = 1 << 20
#: Units of ``len(text) * program size`` one step stands for (RE2's slowest path, a bounded
#: NFA, does about 10^9 of them a second).
_REGEX_UNITS_PER_STEP = 1_000
#: Characters of a string one step of a ``format`` check stands for: the checkers are linear
#: (RE2 over a small fixed program, :mod:`datetime`/:mod:`ipaddress` parsing), about 1 µs per
#: hundred characters at worst, so this overcharges several times.
_FORMAT_CHARS_PER_STEP = 100

Keyword = Callable[[Any, Any, Any, Mapping[str, Any]], Iterator[ValidationError] | None]


class TooCostly(Exception):
    """Validating took more than :data:`MAX_STEPS` steps."""


class _Budget:
    __slots__ = ("enums", "left")

    def __init__(self, steps: int) -> None:
        self.left = steps
        #: Canonical forms of each ``enum`` list met, by its id (the schema outlives the validation).
        self.enums: dict[int, frozenset[Any]] = {}

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise TooCostly(f"checking it against the DAG's params takes more than {MAX_STEPS:,} steps")


_budget: ContextVar[_Budget | None] = ContextVar("leoflow_params_budget", default=None)


def _spend(steps: int) -> None:
    budget = _budget.get()
    if budget is not None:
        budget.spend(steps)


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = REGEX_MAX_MEM
    options.log_errors = False  # a refused pattern is the DAG author's 422, not the replica's stderr
    return options


_OPTIONS = _options()


def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached by the module); raises ``re2.error`` if RE2 cannot run it."""
    return re2.compile(pattern, _OPTIONS)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's ``pattern`` semantics)."""
    compiled = compile_pattern(pattern)
    _spend(1 + (len(text) + 1) * compiled.programsize // _REGEX_UNITS_PER_STEP)
    try:
        return compiled.search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate: not text any pattern can describe
        return False


# --------------------------------------------------------------------------- keywords

def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [key for key in instance
            if key not in properties and not any(search(pattern, key) for pattern in patterns)]


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        shown = ", ".join(repr(extra) for extra in sorted(extras)[:10])
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({shown} {verb} unexpected)")


def _canonical(value: Any) -> Any:
    """A hashable form equal for values JSON Schema calls equal (1 == 1.0; true != 1; key order)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, float) and value.is_integer():
        return ("number", int(value))
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_canonical(item) for item in value))
    return ("other", json.dumps(value, default=repr))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        _spend(len(instance))
        if len({_canonical(item) for item in instance}) != len(instance):
            yield ValidationError(f"{_short(instance)} has non-unique elements")


def _enum(validator: Any, values: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    budget = _budget.get()
    known = budget.enums.get(id(values)) if budget is not None else None
    if known is None:
        _spend(len(values))
        known = frozenset(_canonical(value) for value in values)
        if budget is not None:
            budget.enums[id(values)] = known
    if _canonical(instance) not in known:
        yield ValidationError(f"{_short(instance)} is not one of {_short(values)}")


def _format(validator: Any, format: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """jsonschema's ``format``, charged by the string's length (each checker is linear in it)."""
    if isinstance(instance, str):
        _spend(len(instance) // _FORMAT_CHARS_PER_STEP)
    yield from _FORMAT(validator, format, instance, schema)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def _counted(keyword: Keyword) -> Keyword:
    """``keyword`` charged to the budget: one step, and :data:`_ERROR_STEPS` per error it reports."""
    def charged(validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        _spend(1)
        errors = keyword(validator, value, instance, schema)
        return None if errors is None else _charging(errors)
    return charged


def _charging(errors: Iterator[ValidationError]) -> Iterator[ValidationError]:
    for error in errors:
        _spend(_ERROR_STEPS)
        yield error


_FORMAT = Draft202012Validator.VALIDATORS["format"]
_KEYWORDS: dict[str, Keyword] = {**Draft202012Validator.VALIDATORS, "pattern": _pattern, "format": _format,
                                 "patternProperties": _pattern_properties,
                                 "additionalProperties": _additional_properties, "uniqueItems": _unique_items,
                                 "enum": _enum}

#: Draft 2020-12 with RE2 regular expressions and every keyword charged to the budget.
ParamsValidator = extend(Draft202012Validator, {name: _counted(fn) for name, fn in _KEYWORDS.items()})

def _is_re2(instance: object) -> bool:
    return not isinstance(instance, str) or compile_pattern(instance) is not None


#: The format checker of :mod:`leoflow.model.spec.params_formats`, used both for a schema (the
#: metaschema's ``format: regex``, on ``pattern`` and the keys of ``patternProperties``, means
#: "RE2 can run it") and for a conf's strings.
FORMATS: FormatChecker = format_checker(_is_re2, (re2.error, UnicodeEncodeError))


def first_error(schema: Mapping[str, Any], instance: Any) -> ValidationError | None:
    """The most relevant error of ``instance`` against ``schema``, or None; raises :class:`TooCostly`.

    Inside :func:`one_budget` it spends that budget; otherwise it has :data:`MAX_STEPS` of its own.
    """
    with one_budget():
        return best_match(ParamsValidator(schema, format_checker=FORMATS).iter_errors(instance))


@contextmanager
def one_budget() -> Iterator[None]:
    """One budget of :data:`MAX_STEPS` for every :func:`first_error` inside (a schema's defaults,
    checked one by one when it is applied, share it), or the enclosing one if there is one."""
    if _budget.get() is not None:
        yield
        return
    token = _budget.set(_Budget(MAX_STEPS))
    try:
        yield
    finally:
        _budget.reset(token)
