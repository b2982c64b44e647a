"""Every limit on what users send, in one table: the validators read it, the docs print it.

A scheduler that runs other people's jobs must survive whatever they type. Each number, name
and nested value a user can put in a DAG spec, a run request or a request body has a limit
here, chosen to be generous for real jobs and far from anything that could overflow: datetime
arithmetic (a timeout of 10^12 seconds overflows ``datetime + timedelta``), float exponents
(the retry backoff doubles per try), the kernel's limits on a process' argv and environment
(``MAX_ARG_STRLEN`` is 128 KiB per string, ``ARG_MAX`` typically 2 MiB in total), Kubernetes
names (63-character labels) and PostgreSQL (``jsonb`` rejects NUL characters).

The validators (:mod:`.fields`, :mod:`.bounds`, :mod:`.spec`, :mod:`.run_request`,
:mod:`.yaml_loader`) take their numbers from the objects below, and :data:`LIMITS` lists them
all for the "Limits" table of ``docs/limits.md`` (``python -m leoflow.cli.docs`` renders it; a
test keeps the page equal to it). A new input field gets a row here and a poison test.

Changing a limit is a compatibility decision: the scheduler re-validates stored specs, so a
tighter limit fails runs of DAG versions written before it (with a readable reason, not a
crash).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


def _shown_number(value: float) -> str:
    if isinstance(value, int) and abs(value) >= 10**15:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 10_000 else 'thousands of'} digits"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _duration(seconds: float) -> str:
    days = seconds / DAY
    return f" ({days:g} days)" if seconds >= DAY and days.is_integer() else ""


@dataclass(frozen=True)
class Range:
    """A numeric field's range; ``integer`` fields refuse fractions, none accept booleans."""

    subject: str
    minimum: float
    maximum: float
    why: str
    integer: bool = False
    #: The minimum itself is refused (a timeout of 0 s means nothing).
    above_minimum: bool = False
    seconds: bool = False

    @property
    def rule(self) -> str:
        low = f"greater than {_count(self.minimum)}" if self.above_minimum else f"at least {_count(self.minimum)}"
        kind = "an integer" if self.integer else "a number"
        unit = " seconds" if self.seconds else ""
        return f"{kind}, {low}, at most {_count(self.maximum)}{unit}{_duration(self.maximum)}"

    def problem(self, value: float) -> str:
        unit = f"{' seconds' if self.seconds else ''}{_duration(self.maximum)}"
        low = f"greater than {_count(self.minimum)} and at most" if self.above_minimum else \
            f"between {_count(self.minimum)} and"
        return f"must be {low} {_count(self.maximum)}{unit}, got {_shown_number(value)}"

    def contains(self, value: float) -> bool:
        above = value > self.minimum if self.above_minimum else value >= self.minimum
        return above and value <= self.maximum


@dataclass(frozen=True)
class Name:
    """An identifier: a pattern (which bounds its length) and the rule in words."""

    subject: str
    pattern: re.Pattern[str]
    max_length: int
    rule: str
    why: str

    def matches(self, value: str) -> bool:
        return self.pattern.fullmatch(value) is not None


@dataclass(frozen=True)
class Length:
    """The longest accepted string, in characters."""

    subject: str
    maximum: int
    why: str
    unit: str = "characters"

    @property
    def rule(self) -> str:
        return f"at most {_count(self.maximum)} {self.unit}"


@dataclass(frozen=True)
class Count:
    """The most items of a kind (tasks of a DAG, dependencies of a DAG, ...)."""

    subject: str
    minimum: int
    maximum: int
    unit: str
    why: str

    @property
    def rule(self) -> str:
        return f"{_count(self.minimum)} to {_count(self.maximum)} {self.unit}"


@dataclass(frozen=True)
class Size:
    """A nested value's budget: bytes of its canonical JSON, nesting depth and entries.

    The canonical JSON is compact, with sorted keys and UTF-8 (what ``LEOFLOW_RUN_CONF``
    carries); entries are mapping keys plus list items at every level; a scalar has depth 0,
    ``{"a": 1}`` depth 1.
    """

    subject: str
    max_bytes: int
    max_depth: int
    max_entries: int
    why: str

    @property
    def rule(self) -> str:
        return (f"at most {_count(self.max_bytes)} bytes of canonical JSON, nested at most "
                f"{self.max_depth} deep, at most {_count(self.max_entries)} keys and items")


@dataclass(frozen=True)
class Moments:
    """A date/time range: ``earliest`` included, ``before`` excluded."""

    subject: str
    earliest: datetime
    before: datetime
    why: str

    @property
    def rule(self) -> str:
        return f"from {self.earliest:%Y-%m-%d} (included) to {self.before:%Y-%m-%d} (excluded), UTC"


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


@dataclass(frozen=True)
class Cron:
    """A schedule must be a real one: parseable, short, and firing within a few years."""

    subject: str
    max_length: int
    fires_within_years: int
    why: str

    @property
    def rule(self) -> str:
        return (f"5-field cron or a preset, at most {self.max_length} characters, must fire at least once "
                f"within {self.fires_within_years} years of now (or of `start_date` when later)")


Limit = Range | Name | Length | Count | Size | Moments | Documents | Cron

# --------------------------------------------------------------------------- identifiers

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$")
NAME_RULE = "use 1-50 of a-z, 0-9 and '-', starting and ending with a letter or digit"
_NAME_WHY = ("part of Kubernetes pod names and labels (63 characters at most, lower case) "
             "and of URLs; a DAG id and a task id together still fit a pod name")
DAG_ID = Name("`dag_id`", NAME_RE, 50, NAME_RULE, _NAME_WHY)
TASK_ID = Name("`tasks[].id`, `tasks[].depends_on[]`", NAME_RE, 50, NAME_RULE, _NAME_WHY)

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+~-]{0,249}$")
RUN_ID_RULE = "must be 1-250 characters of letters, digits and _.:+~- starting with a letter or digit"
RUN_ID = Name("`run_id` (trigger request)", RUN_ID_RE, 250, RUN_ID_RULE.removeprefix("must be "),
              "a URL path segment and LEOFLOW_RUN_ID; scheduled runs are named `scheduled__<ISO date>`, "
              "manual ones `manual__<ISO date>` unless the caller chooses")

# --------------------------------------------------------------------------- DAG fields

DESCRIPTION = Length("`description`", 2_000, "shown in lists; documentation belongs in the repository")
IMAGE = Length("`tasks[].image`", 500, "far above any registry path plus tag and digest")
TIMEZONE = Length("`timezone`", 64, "IANA names are shorter than 40 characters")
SCHEDULE = Cron("`schedule`", 256, 5, "a cron that never fires (`0 0 31 2 *`) or fires once a "
                "decade is a mistake, and would make every look-ahead search for nothing")
START_DATE = Moments("`start_date`", datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC),
                     "cron and catch-up arithmetic stays centuries away from Python's year 9999")
MAX_ACTIVE_RUNS = Range("`max_active_runs`", 1, 100_000, "more concurrent runs of one DAG than any "
                        "cluster runs tasks; an integer PostgreSQL compares cheaply", integer=True)
RETRIES = Range("`default_retries`, `tasks[].retries`", 0, 1_000,
                "the retry delay doubles per try; 2^1000 times the longest delay is still a finite "
                "float, so the backoff arithmetic cannot overflow before the cap applies", integer=True)
RETRY_DELAY = Range("`tasks[].retry_delay_seconds`", 0, 7 * DAY,
                    "a retry more than a week later is a new schedule, not a retry", seconds=True)
MAX_RETRY_DELAY = Range("`tasks[].max_retry_delay_seconds`", 0, 7 * DAY,
                        "the same week as `retry_delay_seconds` (LEOFLOW_MAX_RETRY_DELAY caps it too)",
                        seconds=True)
TIMEOUT = Range("`tasks[].timeout_seconds`", 0, 30 * DAY,
                "month-long jobs (model training) fit; 10^12 s would overflow date arithmetic",
                above_minimum=True, seconds=True)
RUN_TIMEOUT = Range("`run_timeout_seconds` (DAG, trigger request)", 0, 366 * DAY,
                    "a run deadline of up to a year: longer than any run anyone waits for, far from "
                    "date arithmetic's limits", above_minimum=True, seconds=True)
TASKS = Count("`tasks`", 1, 10_000, "tasks", "a run's task instances are created in one "
              "statement; far beyond any hand-written DAG")
EDGES = Count("`tasks[].depends_on` (all tasks)", 0, 50_000, "dependencies",
              "the scheduler walks every edge of a running DAG on each tick")
COMMAND = Size("`tasks[].command`, `tasks[].args` (each)", 64 * 1024, 1, 1_000,
               "argv of a process: with the env and the conf it stays below the kernel's 2 MiB ARG_MAX")
ENV = Size("`tasks[].env`", 64 * 1024, 8, 4_096,
           "the mapping form `{NAME: value}` and the list form `[{name, value or valueFrom}]` alike; "
           "with argv and the conf it stays below the kernel's ARG_MAX")
TEMPLATE_REFS = Count("`{{ … }}` references in one string of `command`, `args`, `env`", 0, 64, "references",
                      "rendering is one pass over the string; more references than a hand-written command needs, "
                      "few enough that a string's render stays a handful of lookups")
RENDERED_ARG = Length("a rendered `command`/`args` element or `env` value (at launch)", 128 * 1024 - 1,
                      "the kernel's MAX_ARG_STRLEN (128 KiB with the terminating NUL) per argv or environment "
                      "string; past it the try fails naming the size: pass a URI to large data", unit="bytes")
RESOURCES = Size("`tasks[].resources`", 8 * 1024, 2, 64, "requests and limits of a few resources")
QUANTITY = Length("`tasks[].resources.*.*` (a quantity)", 32,
                  "a Kubernetes quantity like `500m` or `128Mi`; numbers must be finite and at least 0")
PARAMS = Size("`params` (JSON Schema of the runs' conf)", 32 * 1024, 16, 10_000,
              "checked against every trigger's conf and, for a scheduled DAG, by the leader against its "
              "defaults: a hand-written form fits many times over; references refused, patterns run by RE2")
SPEC = Size("a DAG spec (whole document)", 8 * 1024 * 1024, 16, 1_000_000,
            "a 10,000-task DAG fits; it is stored in PostgreSQL (no NUL characters or lone surrogates in any "
            "string) and parsed again by the scheduler")

# --------------------------------------------------------------------------- task outputs

OUTPUT_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
OUTPUT_NAME = Name("`tasks[].outputs` (a name)", OUTPUT_NAME_RE, 64,
                   "1-64 of letters, digits and '_', not starting with a digit",
                   "an identifier in `{{ tasks.T.outputs.NAME }}` references and CEL conditions")
OUTPUT_DECLS = Count("`tasks[].outputs` (declared)", 0, 64, "outputs",
                     "a task hands a few values on; 64 names of 64 characters still fit its 4,095 bytes")
OUTPUTS = Size("the outputs a try writes (`LEOFLOW_OUTPUTS`)", 4_095, 16, 1_000,
               "one byte under Kubernetes' 4 KiB termination message, whose kubelet keeps only the last "
               "4,096 bytes of a longer file, so a cut message is refused rather than misread; checked as "
               "written (UTF-8, one JSON object, no duplicate keys, NaN or NUL, integers within 64 bits): "
               "pass a URI to larger data")

# --------------------------------------------------------------------------- fairness (pools, priorities)

POOL_NAME = Name("`tasks[].pool`, `name` (pool request)", NAME_RE, 50, NAME_RULE,
                 "the same rule as DAG and task ids: pool names appear in URLs, the CLI and the dashboard")
PRIORITY = Range("`tasks[].priority`", -1_000_000, 1_000_000, "only the order matters; symmetric and far inside "
                 "PostgreSQL's 32-bit integer", integer=True)
MAX_ACTIVE_TASKS = Range("`max_active_tasks`", 1, 100_000, "like `max_active_runs`: beyond any cluster's "
                         "concurrency", integer=True)
POOL_SLOTS = Range("`slots` (pool request)", 0, 100_000, "far above any cluster's concurrent pods; 0 holds the "
                   "pool's tasks back", integer=True)
POOL_DESCRIPTION = Length("`description` (pool request)", 500, "one line in the pool list")

# --------------------------------------------------------------------------- conditions and exit codes

WHEN = Length("`tasks[].when` (a CEL expression)", 1_024, "the CEL library has no cost limit, so the "
              "expression is bounded by its text: a condition is a line or two, and 2,000 nested "
              "parentheses or a 100,000-term `&&` never reach the parser")
WHEN_MACROS = Count("`tasks[].when` (macros)", 0, 4, "of `all`, `exists`, `exists_one`, none inside another",
                    "each is linear in its list (a 10,000-item `exists`: about 20 ms), so four stay under "
                    "0.1 s; `map` and `filter` are quadratic in this library and refused, nesting multiplies")
WHEN_ACTIVATION = Count("the values one `when` reads (run conf and the upstream outputs it names)", 0,
                        256 * 1024, "bytes of JSON", "read and converted before every evaluation; past "
                        "it the task fails unevaluated, naming the size")
SKIP_EXIT_CODES = Count("`tasks[].skip_on_exit_code`", 0, 32, "exit codes, each 0 to 255",
                        "a process exit status is one byte; a few codes mean \"nothing to do\"")

# --------------------------------------------------------------------------- exit handlers

ON_EXIT = Count("`on_exit`", 0, 20, "exit tasks", "notify, clean up, record: a handful; each is a task "
                "instance created when the run's other tasks end, in that one transaction")

# --------------------------------------------------------------------------- retry policies

RETRY_FACTOR = Range("`tasks[].retry_policy.factor`", 1, 10, "10 retries at factor 10 already pass any "
                     "delay cap (LEOFLOW_MAX_RETRY_DELAY caps every delay)")
RETRY_MAX_DURATION = Range("`tasks[].retry_policy.max_duration_seconds`", 1, 7 * DAY,
                           "the same week as `retry_delay_seconds`, counted from the first try's start", seconds=True)
RETRY_EXIT_CODES = Count("`tasks[].retry_policy.on_exit_codes`", 1, 32, "exit codes, each 0 to 255",
                         "as `skip_on_exit_code`: a few codes mean \"try again\"")

# --------------------------------------------------------------------------- mapped tasks

MAP_ITEMS = Count("`tasks[].map_over` (items, per task per run)", 0, 10_000, "items",
                  "each item is a task instance with its own tries, pod and logs, all inserted in the one "
                  "transaction that expands the task (10,000 in well under a second); past it the task fails "
                  "naming the count, and nothing is inserted")
MAX_PARALLEL = Range("`tasks[].max_parallel`", 1, 10_000, "how many instances of one mapped task may be queued "
                     "or running at once, beside pools and `max_active_tasks`", integer=True)
MAP_SOURCE = Size("`tasks[].map_over` (a literal list)", 256 * 1024, 8, 20_000,
                  "a list written in the spec; lists known at run time come from a parameter or an "
                  "upstream output, or `count:`")

# --------------------------------------------------------------------------- reusable templates

TEMPLATES = Count("`templates` (a DAG's)", 0, 200, "templates", "a DAG's task shapes, each checked once per "
                  "apply and inlined into every task that uses it; shapes shared by many DAGs belong in "
                  "cluster templates")
TEMPLATE_NAME = Name("`templates[].name`, a cluster template's name", NAME_RE, 50, NAME_RULE,
                     "the same rule as task ids: written in `uses:`, URLs and the CLI")
TEMPLATE_INPUTS = Count("`templates[].inputs`, `tasks[].inputs`", 0, 64, "inputs",
                        "as many knobs as a shared operator has; each `{{ inputs.X }}` is substituted at apply")
INPUT_NAME = Name("`templates[].inputs` (a name)", OUTPUT_NAME_RE, 64,
                  "1-64 of letters, digits and '_', not starting with a digit",
                  "an identifier in `{{ inputs.NAME }}` references")
CLUSTER_TEMPLATE = Size("a cluster template (`PUT /api/v2/templates/{name}` body)", 256 * 1024, 16, 20_000,
                        "one task's shape with its pod settings; every DAG that uses it inlines a copy")
CLUSTER_TEMPLATE_NAMES = Count("cluster templates (names not deleted)", 0, 1_000, "templates",
                               "a DAG apply reads the ones it names; a platform team's catalogue of shared "
                               "task shapes, far from a table scan's cost")


# --------------------------------------------------------------------------- datasets

DATASET_URI = Length("a dataset URI (`tasks[].produces[]`, `schedule.datasets.all[]`/`any[]`, `uri` of a dataset "
                     "event)", 1_000, "an identifier Leoflow never reads, only compares: far above any bucket, "
                     "table or path name; no control characters, not empty")
PRODUCES = Count("`tasks[].produces`", 0, 100, "URIs", "each success of the task records one event per URI "
                 "in the transaction of the success")
DATASET_CONDITION = Count("`schedule.datasets.all` / `schedule.datasets.any`", 1, 100, "URIs",
                          "a DAG's queue keeps one coalesced row per URI it waits on, so this also bounds it")
DATASET_EXTRA = Size("`extra` (dataset event request)", 16 * 1024, 8, 1_000,
                     "stored with the event and shown to the runs it triggers (LEOFLOW_TRIGGERING_EVENTS)")
DATASET_EVENT_BATCH = Count("`events` (dataset event request, the list form)", 1, 1_000, "events",
                            "recorded in one transaction, all or none, each with its audit row; an outside "
                            "system that reports many events sends one request per thousand, not one per event")

# --------------------------------------------------------------------------- schedule forms and data intervals

SCHEDULE_CRONS = Count("`schedule` (a list of crons)", 1, 20, "cron expressions",
                       "each is evaluated when the DAG is planned; a few schedules per DAG (weekdays, weekends, "
                       "month ends), not a calendar written out")
SCHEDULE_EVERY = Range("`schedule.every` (a duration such as `15m`, `1h30m` or seconds)", MINUTE, 366 * DAY,
                       "the scheduler ticks about once a second and plans by the minute; a year is the "
                       "longest interval a yearly cron gives", integer=True, seconds=True)
END_DATE = Moments("`end_date`", datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC),
                   "the same range as `start_date`, and after it")
STARTING_DEADLINE = Range("`starting_deadline_seconds`", 0, 366 * DAY, "a slot missed by more than this is "
                          "skipped; up to the longest interval a schedule has", above_minimum=True, seconds=True)
LOGICAL_DATE = Moments("`logical_date` (trigger request)", datetime(1970, 1, 1, tzinfo=UTC),
                       datetime(2200, 1, 1, tzinfo=UTC), "the same range as `start_date`: the date "
                       "arithmetic of templates and waits stays centuries away from Python's year 9999")

# --------------------------------------------------------------------------- waits and approvals

WAIT_FOR = Count("`tasks[].wait_for`", 0, 20, "conditions", "the leader checks each waiting condition "
                 "on change and on a coarse timer, set-based; a gate is a few conditions, not a list of DAGs")
WAIT_OFFSET = Range("`tasks[].wait_for[].offset` / `not_before` (a duration such as `-1d` or `+2h`)",
                    -366 * DAY, 366 * DAY, "a year either way of the run's logical date: far from date "
                    "arithmetic's limits", seconds=True)
WAIT_TIMEOUT = Range("`tasks[].wait_for[].timeout_seconds`", 0, 30 * DAY, "a wait holds no pod and no slot, "
                     "but a gate that is never opened must end some time (default 7 days, as an Airflow sensor)",
                     above_minimum=True, seconds=True)
APPROVAL_MESSAGE = Length("`tasks[].wait_for[].approval.message`", 500, "shown to approvers in the API, CLI and "
                          "dashboard: a question, not a document")
APPROVAL_COMMENT = Length("`comment` (approval request)", 2_000, "stored with the decision and in the audit log; "
                          "a rejection's comment becomes the task's reason (first 500 characters)")

# --------------------------------------------------------------------------- access control

TOKEN_NAME = Name("`name` (token request)", NAME_RE, 50, NAME_RULE,
                  "shown in token lists, logs and the audit log, like a pool's name")
TEAM_NAME = Name("`team` (token request, DAG spec, teams file)", NAME_RE, 50, NAME_RULE,
                 "the same rule as DAG ids: team names appear in URLs, labels and namespaces")
TEAM_NAMESPACE = Name("`teams[].namespace` (teams file)", re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"), 63,
                      "use 1-63 of a-z, 0-9 and '-', starting and ending with a letter or digit",
                      "a Kubernetes namespace name (an RFC 1123 label): the team's task pods run there")
TEAM_SERVICE_ACCOUNT = Name("`teams[].service_account` (teams file)",
                            re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"), 253,
                            "use 1-253 of a-z, 0-9, '-' and '.', starting and ending with a letter or digit",
                            "a Kubernetes service account name (an RFC 1123 subdomain) in the team's namespace")
TOKEN_EXPIRY = Range("`expires_in_days` (token request)", 1, 3_650, "every token expires; the cluster's "
                     "LEOFLOW_API_TOKEN_MAX_DAYS (default 90) caps it further", integer=True)
TOKENS = Count("runtime API tokens (not revoked, not expired)", 0, 10_000, "tokens",
               "every replica keeps them in memory to check a request in microseconds (about 1 MB at the "
               "limit); a creation past it is refused (409)")

# --------------------------------------------------------------------------- run requests

CONF = Size("`conf` (trigger request)", 64 * 1024, 32, 10_000,
            "every try receives it as LEOFLOW_RUN_CONF (one string: the kernel allows 128 KiB); "
            "plain JSON: string keys, finite numbers, no NUL characters")

CLEAR_TASKS = Count("`tasks` (clear request)", 1, 10_000, "task ids", "every task of the largest DAG")

# --------------------------------------------------------------------------- request bodies and files

DOCUMENT = Documents("a YAML or JSON document (request body, `dags apply` file)", 64, 500_000,
                     "parsing is bounded before anything is built: an alias bomb of a few hundred bytes "
                     "fails at the budget instead of expanding to gigabytes")
#: Bytes of scalar text a YAML text may stand for when the caller names no budget (the CLI, the
#: packaged example, DAG files); the API passes LEOFLOW_MAX_BODY_BYTES.
DOCUMENT_MAX_BYTES = SPEC.max_bytes
PAGE_LIMIT = Range("`limit` (list query parameter)", 1, 500, "one page is one database round trip",
                   integer=True)
DEFAULT_PAGE_LIMIT = 100
TRY_NUMBER = Range("`try` (log query parameter)", 1, 2**31 - 1, "a PostgreSQL integer", integer=True)
#: 1 PB: beyond any log, and within the 18 digits a query integer may have.
LOG_BYTES_MAX = 10**15
LOG_OFFSET = Range("`offset` (archived log query parameter)", 0, LOG_BYTES_MAX, "a byte offset into a log; past "
                   "the end answers nothing", integer=True)
LOG_LENGTH = Range("`length` (archived log query parameter)", 1, LOG_BYTES_MAX, "bytes to read; the answer "
                   "streams, so a whole log may be asked for", integer=True)
LOG_TAIL = Range("`tail` (archived log query parameter)", 1, LOG_BYTES_MAX, "the last bytes of a log; the answer "
                 "streams", integer=True)
LOG_CONTAINER = Length("`container` (archived log query parameter)", 63,
                       "a Kubernetes container name (a DNS label), or `NAME#N` for the log of its N-th restart: "
                       "it is part of the archive's object names")
POD_EVENTS = Count("Kubernetes events kept per try (distinct events; a repeat only counts up)", 0, 200, "events",
                   "a pod stuck in a back-off loop repeats a handful of events (their `count` grows); later "
                   "new ones are dropped and the kept ones still say why")
POD_EVENT_MESSAGE = Length("a kept Kubernetes event's message", 1_024,
                           "a kubelet or scheduler message is one line; a longer one is cut, marked with '…'")

# --------------------------------------------------------------------------- task artifacts

ARTIFACT_NAME = Name("`tasks[].artifacts` (a name)", OUTPUT_NAME_RE, 64,
                     "1-64 of letters, digits and '_', not starting with a digit",
                     "an identifier in `{{ tasks.T.artifacts.NAME }}` references and part of an object name")
ARTIFACT_PATH = Length("`tasks[].artifacts[].path`", 255,
                       "relative to `$LEOFLOW_ARTIFACTS`, segments of letters, digits, '.', '_' and '-' not "
                       "starting with '.', so no absolute path and no `..` can leave the artifacts directory")
ARTIFACT_DECLS = Count("`tasks[].artifacts.outputs` / `.inputs` (each)", 0, 32, "artifacts",
                       "each one is a tar archive moved by the executor (or, on Kubernetes, a sidecar) per try")
ARTIFACT_BYTES = Range("an output artifact (bytes before compression)", 0, 5 * 1024**3,
                       "5 GiB: larger is data for the user's own storage; a bigger output fails the try's "
                       "upload with this reason", integer=True)
ARTIFACT_TRY_BYTES = Range("all output artifacts of one try (bytes before compression)", 0, 20 * 1024**3,
                           "20 GiB: the artifacts volume and the upload time of one try stay bounded",
                           integer=True)
ARTIFACT_FILES = Count("files and directories in one artifact", 0, 100_000, "entries",
                       "an archive is unpacked before the consuming task starts: a bound on inodes and time")

# --------------------------------------------------------------------------- OpenID Connect tokens

BEARER_JWT = Length("an OpenID Connect bearer token (`Authorization: Bearer <JWT>`)", 16 * 1024,
                    "refused (401) before it is decoded; a token naming a few hundred groups fits, and proxies "
                    "in front of the API usually cap a header at 8-16 KiB anyway", unit="bytes")
OIDC_GROUPS = Count("the groups claim of an OpenID Connect token (`LEOFLOW_OIDC_GROUPS_CLAIM`)", 0, 1_000,
                    "strings of at most 256 characters", "matched against the admin groups (and team rules) on "
                    "every request; a larger or mistyped claim refuses the token (401)")

#: Every limit, in the order the "Limits" table of docs/limits.md lists them.
LIMITS: tuple[Limit, ...] = (
    DAG_ID, TASK_ID, RUN_ID, DESCRIPTION, SCHEDULE, TIMEZONE, START_DATE, MAX_ACTIVE_RUNS, RETRIES,
    RETRY_DELAY, MAX_RETRY_DELAY, TIMEOUT, RUN_TIMEOUT, TASKS, EDGES, IMAGE, COMMAND, ENV, TEMPLATE_REFS,
    RENDERED_ARG, RESOURCES, QUANTITY,
    PARAMS, SPEC, OUTPUT_NAME, OUTPUT_DECLS, OUTPUTS, POOL_NAME, PRIORITY, MAX_ACTIVE_TASKS, POOL_SLOTS,
    POOL_DESCRIPTION, CONF, CLEAR_TASKS, DOCUMENT, PAGE_LIMIT, TRY_NUMBER, LOG_OFFSET, LOG_LENGTH, LOG_TAIL,
    LOG_CONTAINER, POD_EVENTS, POD_EVENT_MESSAGE,
    WHEN, WHEN_MACROS, WHEN_ACTIVATION, SKIP_EXIT_CODES, ON_EXIT,
    RETRY_FACTOR, RETRY_MAX_DURATION, RETRY_EXIT_CODES, MAP_ITEMS, MAX_PARALLEL, MAP_SOURCE,
    BEARER_JWT, OIDC_GROUPS,
    ARTIFACT_NAME, ARTIFACT_PATH, ARTIFACT_DECLS, ARTIFACT_BYTES, ARTIFACT_TRY_BYTES, ARTIFACT_FILES,
    TEMPLATES, TEMPLATE_NAME, TEMPLATE_INPUTS, INPUT_NAME, CLUSTER_TEMPLATE, CLUSTER_TEMPLATE_NAMES,
    TOKEN_NAME, TEAM_NAME, TEAM_NAMESPACE, TEAM_SERVICE_ACCOUNT, TOKEN_EXPIRY, TOKENS,
    DATASET_URI, PRODUCES, DATASET_CONDITION, DATASET_EXTRA, DATASET_EVENT_BATCH,
    WAIT_FOR, WAIT_OFFSET, WAIT_TIMEOUT, APPROVAL_MESSAGE, APPROVAL_COMMENT,
    SCHEDULE_CRONS, SCHEDULE_EVERY, END_DATE, STARTING_DEADLINE, LOGICAL_DATE,
)
