"""Every limit on what users send, in one table: the validators read it, the README prints it.

A scheduler that runs other people's jobs must survive whatever they type. Each number, name
and nested value a user can put in a DAG spec, a run request or a request body has a limit
here, chosen to be generous for real jobs and far from anything that could overflow: datetime
arithmetic (a timeout of 10^12 seconds overflows ``datetime + timedelta``), float exponents
(the retry backoff doubles per try), the kernel's limits on a process' argv and environment
(``MAX_ARG_STRLEN`` is 128 KiB per string, ``ARG_MAX`` typically 2 MiB in total), Kubernetes
names (63-character labels) and PostgreSQL (``jsonb`` rejects NUL characters).

The validators take their numbers from the objects below, and :data:`LIMITS` lists them all.
So far: what a YAML or JSON document may hold once parsed (:mod:`.yaml_loader`, the API's
body decoding); the DAG spec and run request fields follow.
"""

from __future__ import annotations

from dataclasses import dataclass


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


@dataclass(frozen=True)
class Documents:
    """How much a YAML or JSON document may hold once parsed, aliases expanded."""

    subject: str
    max_depth: int
    max_values: int
    why: str

    @property
    def rule(self) -> str:
        return (f"nested at most {self.max_depth} deep, at most {_count(self.max_values)} values "
                "(a YAML alias counts as what it expands to, its text as bytes against the body limit); "
                "recursive aliases and duplicate keys refused")


# --------------------------------------------------------------------------- request bodies and files

DOCUMENT = Documents("a YAML or JSON document (request body, `dags apply` file)", 64, 500_000,
                     "parsing is bounded before anything is built: an alias bomb of a few hundred bytes "
                     "fails at the budget instead of expanding to gigabytes")
#: Bytes of scalar text a YAML text may stand for when the caller names no budget (the CLI, the
#: packaged example); the API passes LEOFLOW_MAX_BODY_BYTES.
DOCUMENT_MAX_BYTES = 8 * 1024 * 1024

#: Every limit, in the order the README's "Limits" table lists them.
LIMITS: tuple[Documents, ...] = (DOCUMENT,)
