"""The ``format`` values a DAG's ``params`` may declare, and how a conf's strings are checked against them.

JSON Schema (draft 2020-12) calls ``format`` an annotation unless a validator opts in; an author
who writes ``day: {type: string, format: date}`` expects ``2026-13-45`` to be refused, so Leoflow
opts in: a conf string whose ``format`` is one of :data:`KNOWN` must match it, or the trigger is
a 422 naming the param (``conf.day: '2026-13-45' is not a 'date'``).

A ``format`` outside :data:`KNOWN` is refused when the DAG is applied
(:func:`leoflow.model.spec.params.check_params`), not ignored as the specification allows: a format a
validator silently skips looks checked to the author and is not (``format: datetime``, a typo of
``date-time``, would accept anything). A version stored before this rule keeps its unknown
formats as annotations (:meth:`jsonschema.FormatChecker.check` skips them), so its triggers
behave as they did.

Every checker here is written out rather than taken from jsonschema's defaults, for two reasons:
jsonschema's ``date-time``, ``time``, ``uri`` and ``hostname`` checkers silently pass when an
optional package (``rfc3339-validator``, ``rfc3987``, ``fqdn``) is not installed, so what a trigger
accepts would depend on the environment; and each checker must cost time linear in the string.
The regular expressions below are RE2's (no backtracking), the rest is :mod:`datetime`,
:mod:`ipaddress` and :class:`uuid.UUID` parsing, all linear; a conf string is at most
:data:`leoflow.model.limits.CONF` bytes, and :mod:`leoflow.model.spec.params_validator` charges each
check to the validation's budget by the string's length.

What each format accepts (RFC 3339 for times, RFC 3986 for URIs, as JSON Schema says):

- ``date``: ``YYYY-MM-DD``, a real calendar day;
- ``time``: ``HH:MM:SS[.frac]`` with an offset (``Z`` or ``+HH:MM``), seconds up to 60 (a leap
  second);
- ``date-time``: a ``date``, ``T``, a ``time`` (``t`` and ``z`` in lower case too);
- ``email``: ``local@domain`` with exactly one ``@`` and no whitespace (the full RFC 5321
  grammar, quoted local parts and all, is not worth a parser: the address is only passed on);
- ``hostname``: dot-separated labels of letters, digits and ``-`` (not at either end), each at
  most 63 characters, 253 in all;
- ``ipv4``, ``ipv6``: what :mod:`ipaddress` parses (no IPv6 zone);
- ``uri``: a scheme, ``:``, then only the characters RFC 3986 allows (percent-escapes complete),
  ``?`` before the query and one ``#`` before the fragment; ``uri-reference`` the same with the
  scheme optional. The authority's inner structure is not parsed;
- ``uuid``: 32 hexadecimal digits in the 8-4-4-4-12 hyphenated form;
- ``regex``: a pattern RE2 can run (the same rule as the schema's own ``pattern``).
"""

from __future__ import annotations

import calendar
import ipaddress
import uuid
from collections.abc import Callable
from typing import Any

import re2
from jsonschema import FormatChecker

#: RE2's memory budget for the format patterns (they are small and fixed; this only bounds them).
_MAX_MEM = 1 << 20


def _compile(pattern: str) -> Any:
    options = re2.Options()
    options.max_mem = _MAX_MEM
    return re2.compile(pattern, options)


_TIME = r"([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
_DATE = _compile(r"(\d{4})-(\d{2})-(\d{2})")
_TIME_ONLY = _compile(_TIME)
_DATE_TIME = _compile(r"(\d{4})-(\d{2})-(\d{2})[Tt]" + _TIME)
_EMAIL = _compile(r"[^\s@]+@[^\s@]+")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = _compile(_LABEL + r"(\." + _LABEL + r")*")
#: RFC 3986's pchar: unreserved, sub-delims, ":" and "@", or a complete percent-escape.
_PCHAR = r"[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2}"
#: hier-part (or relative-part) characters: pchar, "/", and "[" "]" for an IP-literal host.
_REST = rf"(?:{_PCHAR}|[/\[\]])*(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*:"
_URI = _compile(_SCHEME + _REST)
_URI_REFERENCE = _compile(rf"(?:{_SCHEME})?" + _REST)
_UUID = _compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")


def _full(pattern: Any) -> Callable[[str], bool]:
    return lambda text: pattern.fullmatch(text) is not None


def _is_date(text: str) -> bool:
    match = _DATE.fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(part) for part in match.groups())
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]


def _is_date_time(text: str) -> bool:
    return _DATE_TIME.fullmatch(text) is not None and _is_date(text[:10])


def _is_hostname(text: str) -> bool:
    return len(text) <= 253 and _HOSTNAME.fullmatch(text) is not None


def _is_ipv4(text: str) -> bool:
    ipaddress.IPv4Address(text)
    return True


def _is_ipv6(text: str) -> bool:
    return not ipaddress.IPv6Address(text).scope_id


def _is_uuid(text: str) -> bool:
    return _UUID.fullmatch(text) is not None and uuid.UUID(text) is not None


#: Checkers by format name; each takes a string and returns whether it conforms (or raises
#: ``ValueError``, which means it does not).
_CHECKERS: dict[str, Callable[[str], bool]] = {
    "date": _is_date,
    "time": _full(_TIME_ONLY),
    "date-time": _is_date_time,
    "email": _full(_EMAIL),
    "hostname": _is_hostname,
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "uri": _full(_URI),
    "uri-reference": _full(_URI_REFERENCE),
    "uuid": _is_uuid,
}

#: The formats a ``params`` schema may declare (``regex`` is added by
#: :mod:`leoflow.model.spec.params_validator`, which owns RE2's settings for patterns).
KNOWN = frozenset([*_CHECKERS, "regex"])


def format_checker(is_regex: Callable[[object], bool], regex_errors: tuple[type[Exception], ...]) -> FormatChecker:
    """A checker of every format in :data:`KNOWN`; non-strings pass (``format`` speaks only of strings)."""
    checker = FormatChecker(formats=())
    for name, check in _CHECKERS.items():
        checker.checks(name, raises=(ValueError, UnicodeEncodeError))(_strings_only(check))
    checker.checks("regex", raises=regex_errors)(is_regex)
    return checker


def _strings_only(check: Callable[[str], bool]) -> Callable[[object], bool]:
    def checked(instance: object) -> bool:
        return not isinstance(instance, str) or check(instance)
    return checked
