"""What a fake container "does": its command read as a tiny shell script, on a timeline.

The fake kubelet does not execute containers. It interprets ``command + args`` (``sh -c SCRIPT``
is unwrapped; any other argv is read as one statement), statements separated by ``;``, ``&&``
or newlines:

- ``echo WORDS`` → a log line (``$NAME`` and ``${NAME}`` expand from the container's env, as
  resolved by the kubelet: plain values, Secret and ConfigMap references); ``echo WORDS > PATH``
  writes them (and a newline) to a file instead, ``printf WORDS > PATH`` without the newline —
  the kubelet copies the file at the container's ``terminationMessagePath`` into its status;
- ``seq N`` → the lines 1..N (for large logs);
- ``sleep SECONDS`` → time passes (``sleep infinity`` never ends: a sidecar that runs forever);
- ``oom`` → the container exceeds its memory limit: killed with exit code 137, reason ``OOMKilled``;
- ``exit N`` → stop with exit code N; ``false`` → exit code 1; ``true`` and anything else → no-op;
- ``trap '' TERM`` → the container ignores SIGTERM: a graceful delete stops it only when its grace
  period is over (the kubelet's SIGKILL), not at once.

Each line carries the offset (seconds after the start) at which it is written, so a reader of a
running container's log sees only what was "written" so far.
"""

from __future__ import annotations

import contextlib
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Program:
    lines: list[tuple[float, str]] = field(default_factory=list)
    duration: float = 0.0
    exit_code: int = 0
    ignores_term: bool = False
    #: Ended by the kernel's OOM killer (``oom``): exit 137, terminated reason ``OOMKilled``.
    oom: bool = False
    #: Files the program wrote, by path (the last write wins).
    files: dict[str, str] = field(default_factory=dict)

    @property
    def logs(self) -> str:
        return "".join(f"{text}\n" for _, text in self.lines)

    @property
    def endless(self) -> bool:
        return math.isinf(self.duration)


def _expand(word: str, env: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)


def interpret(argv: list[str], env: Mapping[str, str] | None = None) -> Program:
    """What the fake container "does" (see the module docstring)."""
    env = env or {}
    if len(argv) >= 3 and argv[0] in ("sh", "/bin/sh", "bash", "/bin/bash") and argv[1] == "-c":
        script = argv[2]
    else:
        script = shlex.join(argv)
    program = Program()
    for statement in (s.strip() for chunk in script.replace("&&", ";").split("\n") for s in chunk.split(";")):
        try:
            words = shlex.split(statement)
        except ValueError:
            continue
        if not words:
            continue
        verb, rest = words[0], words[1:]
        if verb in ("echo", "printf") and len(rest) >= 2 and rest[-2] == ">":
            text = " ".join(_expand(w, env) for w in rest[:-2])
            program.files[_expand(rest[-1], env)] = text + ("\n" if verb == "echo" else "")
        elif verb == "echo":
            program.lines.append((program.duration, " ".join(_expand(w, env) for w in rest)))
        elif verb == "seq" and rest and rest[-1].isdigit():
            program.lines.extend((program.duration, str(i)) for i in range(1, int(rest[-1]) + 1))
        elif verb == "sleep" and rest:
            if rest[0] in ("infinity", "inf"):
                program.duration = math.inf
                break
            with contextlib.suppress(ValueError):
                program.duration += float(rest[0])
        elif verb == "trap" and rest[-1:] in (["TERM"], ["SIGTERM"], ["15"]):
            program.ignores_term = True
        elif verb == "oom":
            program.exit_code, program.oom = 137, True
            break
        elif verb == "exit":
            program.exit_code = int(rest[0]) if rest and rest[0].isdigit() else 0
            break
        elif verb == "false":
            program.exit_code = 1
            break
    return program
