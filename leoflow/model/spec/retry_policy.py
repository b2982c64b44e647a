"""``retry_policy:`` — which failed tries are retried, and how fast the delay grows (ADR 0014, decision 5).

``retries``, ``retry_delay_seconds`` and ``max_retry_delay_seconds`` keep their meaning; a task
may add::

    retry_policy: {factor: 3, on_exit_codes: [75, 137], when: "try.oom_killed || try.exit_code == 75"}

- ``factor`` (1 to 10, default 2: the doubling every task had): retry n waits
  min(delay * factor^(n-1), ``max_retry_delay_seconds``, ``LEOFLOW_MAX_RETRY_DELAY``).
- ``on_exit_codes``: only a try that exited with one of these is retried (a try without an exit
  code — timed out, its pod lost — is not).
- ``when``: a CEL expression over ``try.number``, ``try.exit_code`` (-1: none), ``try.reason``
  (``""``: none), ``try.oom_killed``, ``try.evicted``, ``try.timed_out`` and
  ``try.duration_seconds`` (-1: unknown); the try is retried only if it is true. It is compiled
  with the same engine and static bounds as ``when:`` conditions
  (:mod:`leoflow.model.spec.expressions`): at most 1,024 characters, only linear macros. An error
  while evaluating it means no retry, and the task's reason says why.

A try is retried iff tries remain and every rule that is set allows it; the leader decides, from
the task's spec, in the pure state machine (:mod:`leoflow.scheduler.transitions`), so both
executors and a failover decide alike. ``oom_killed`` and ``evicted`` are read from the reason
Kubernetes gives (``OOMKilled``, ``Evicted``); the local executor's are always false. ``timed_out``
is true for the leader's ``timeout_seconds`` and for a pod's ``activeDeadlineSeconds`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import within
from leoflow.model.fields import exit_codes_field, no_unknown, plain_number, type_name
from leoflow.model.spec import expressions

#: The facts a ``retry_policy.when`` reads, as ``try.NAME``.
TRY_FIELDS = ("number", "exit_code", "reason", "oom_killed", "evicted", "timed_out", "duration_seconds")
_FIELDS = {"factor", "max_duration_seconds", "on_exit_codes", "when"}
DEFAULT_FACTOR = 2.0
#: A sample try for the dry run at apply time: a type error or a non-boolean is refused then.
_SAMPLE = {"number": 1, "exit_code": 1, "reason": "", "oom_killed": False, "evicted": False, "timed_out": False,
           "duration_seconds": 1.0}


@dataclass(frozen=True)
class TryOutcome:
    """What the leader knows of a failed try when it decides whether to retry it."""

    number: int
    exit_code: int | None = None
    reason: str | None = None
    timed_out: bool = False
    duration_seconds: float | None = None

    def variables(self) -> dict[str, Any]:
        reason = self.reason or ""
        return {"try": {
            "number": self.number, "exit_code": -1 if self.exit_code is None else self.exit_code, "reason": reason,
            "oom_killed": "OOMKilled" in reason, "evicted": reason.startswith("Evicted"),
            "timed_out": self.timed_out or reason.startswith("timed out"),
            "duration_seconds": -1.0 if self.duration_seconds is None else float(self.duration_seconds)}}


@dataclass(frozen=True)
class RetryPolicy:
    """A task's ``retry_policy``, validated."""

    factor: float = DEFAULT_FACTOR
    max_duration_seconds: float | None = None
    on_exit_codes: tuple[int, ...] = ()
    when: str | None = None
    program: Any = field(default=None, compare=False, repr=False)

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {"factor": plain_number(self.factor)}
        if self.max_duration_seconds is not None:
            out["max_duration_seconds"] = plain_number(self.max_duration_seconds)
        if self.on_exit_codes:
            out["on_exit_codes"] = sorted(self.on_exit_codes)
        if self.when is not None:
            out["when"] = self.when
        return out

    def refusal(self, outcome: TryOutcome) -> str | None:
        """Why the policy does not retry ``outcome`` (one line for the task's reason), or None."""
        if self.on_exit_codes and outcome.exit_code not in self.on_exit_codes:
            got = "no exit code" if outcome.exit_code is None else f"exit code {outcome.exit_code}"
            return f"{got} is not in retry_policy.on_exit_codes"
        if self.when is not None:
            program = self.program if self.program is not None else expressions.cel_compile(self.when)
            try:
                result = program.execute(outcome.variables())
            except Exception as exc:  # boundary: the library raises TypeError, KeyError, ValueError, ...
                return f"retry_policy.when failed: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
            if result is not True:
                return "retry_policy.when was false" if result is False else "retry_policy.when is not a boolean"
        return None


def parse_retry_policy(value: object, path: str) -> RetryPolicy | None:
    """``retry_policy`` (None when absent), or ValidationFailed naming the field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping (factor, max_duration_seconds, on_exit_codes, when), "
                               f"got {type_name(value)}")
    no_unknown(value, _FIELDS, path)
    factor = float(within(value.get("factor", DEFAULT_FACTOR), f"{path}.factor", limits.RETRY_FACTOR))
    raw_duration = value.get("max_duration_seconds")
    duration = None if raw_duration is None else float(within(raw_duration, f"{path}.max_duration_seconds",
                                                              limits.RETRY_MAX_DURATION))
    codes = exit_codes_field(value.get("on_exit_codes"), f"{path}.on_exit_codes", limits.RETRY_EXIT_CODES)
    when, program = _compile_when(value.get("when"), f"{path}.when")
    return RetryPolicy(factor=factor, max_duration_seconds=duration, on_exit_codes=codes, when=when, program=program)


def _compile_when(value: object, path: str) -> tuple[str | None, Any]:
    """The expression and its program, held to the bounds of ``when:`` conditions."""
    if value is None:
        return None, None
    bounded = expressions.compile_bounded(value, path, roots=("try",),
                                          reads=f"a retry condition reads try ({', '.join(TRY_FIELDS)})")
    value, program = bounded.source, bounded.program
    try:
        result = program.execute({"try": dict(_SAMPLE)})
    except KeyError as exc:
        raise ValidationFailed(path, f"try has {', '.join(TRY_FIELDS)}; no such key: {exc}") from None
    except TypeError as exc:
        raise ValidationFailed(path, f"type error: {str(exc).splitlines()[0][:200]}") from None
    except Exception:  # boundary: a failure a sample cannot judge (an index, a division by zero)
        return value, program
    except BaseException as exc:
        raise ValidationFailed(path, f"cannot be evaluated: {expressions.panicked(exc)}") from None
    if not isinstance(result, bool):
        raise ValidationFailed(path, f"must be a boolean expression, got {type_name(result)}")
    return value, program
