"""Database URLs as libpq reads them: one parser for validation, display and redaction.

Users give the standard libpq URL, in any of its forms::

    postgresql://user:pass@db:5432/leoflow
    postgresql://user:pass@h1:5432,h2:5432/leoflow?target_session_attrs=read-write   (multi-host)
    postgresql:///leoflow?host=h1,h2&port=5432,5433                                  (hosts in the query)
    postgresql://user@/leoflow?host=/run/leoflow/socket&port=5432                    (unix socket)
    postgresql://user@db/leoflow?options=-csearch_path%3Dteam_a                      (a schema)

Connecting is libpq's job: the data layer hands the URL to the driver unchanged (only the
``+psycopg`` driver suffix is dropped), so every form libpq accepts works for the lock session,
the pools, alembic and the CLI alike. This module exists for what happens *before* a
connection, where the driver may not be imported (the settings layer, the log formatter): it
checks that a URL is one libpq will accept — the scheme, every host's port (1-65535), as many
ports as hosts (or one for all), a database name — and renders it for people with its
passwords (``user:pass@`` and ``password=`` / ``sslpassword=`` in the query) replaced by
``***``. :class:`urllib.parse.urlsplit` cannot do either: it reads ``h1:5432,h2:5432`` as one
host with the port ``5432,h2:5432``.

Failure semantics: :func:`parse_database_url` raises ``ValueError`` with a problem that never
contains the URL (it may hold a password); the settings loader names the variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit

SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
#: Query parameters whose values are secrets (libpq's ``passfile`` is a path, shown as is).
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
EXPECTED = "expected postgresql://USER:PASSWORD@HOST:PORT/DBNAME"


@dataclass(frozen=True)
class DatabaseUrl:
    """What a libpq URL names; ``hosts`` pairs each host with its port (None: libpq's default)."""

    scheme: str
    user: str | None
    password: str | None
    hosts: tuple[tuple[str, int | None], ...]
    dbname: str
    query: tuple[tuple[str, str], ...]
    #: The netloc's pieces as written (for :meth:`redacted`, which changes nothing but secrets).
    user_text: str | None = None
    password_in_userinfo: bool = False
    host_text: str = ""
    path_text: str = ""

    @property
    def multi_host(self) -> bool:
        return len(self.hosts) > 1

    def parameter(self, name: str) -> str | None:
        """The last value of query parameter ``name`` (libpq keeps the last), if given."""
        found = [value for key, value in self.query if key == name]
        return found[-1] if found else None

    @property
    def search_path(self) -> str | None:
        """The ``search_path`` set by ``options=-csearch_path=...``, if any (the install's schema)."""
        options = self.parameter("options") or ""
        for word in options.replace("-c ", "-c").split():
            if word.startswith("-csearch_path="):
                return word[len("-csearch_path="):]
        return None

    def redacted(self) -> str:
        """The URL as given, with every password replaced by ``***``: safe for logs, errors, banners."""
        userinfo = ""
        if self.user_text is not None:
            userinfo = self.user_text + (":***" if self.password_in_userinfo else "") + "@"
        query = "&".join(f"{key}={'***' if key in SECRET_PARAMETERS else quote(value, safe='/,:=-')}"
                         for key, value in self.query)
        return f"{self.scheme}://{userinfo}{self.host_text}{self.path_text}" + (f"?{query}" if query else "")


def _port(text: str) -> int | None:
    if text == "":
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError("has an invalid port (expected 1-65535 for every host)")
    return int(text)


def _split_host(entry: str) -> tuple[str, str]:
    """``h``, ``h:5432``, ``[::1]:5432`` or ``[::1]`` → (host, port text)."""
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0:
            raise ValueError("has an unterminated [IPv6] host")
        host, rest = entry[1:end], entry[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError("has text after an [IPv6] host")
        return host, rest[1:]
    host, _, port = entry.partition(":")
    return unquote(host), port


def _pair_hosts(hosts: list[str], ports: list[str]) -> tuple[tuple[str, int | None], ...]:
    """libpq's rule for host and port lists: one port for all hosts, or one per host."""
    if len(ports) > 1 and len(ports) != len(hosts):
        raise ValueError(f"names {len(hosts)} hosts but {len(ports)} ports (give one port, or one per host)")
    parsed = [_port(p) for p in ports] or [None]
    if len(parsed) == 1:
        parsed = parsed * len(hosts)
    return tuple(zip(hosts, parsed, strict=True))


def parse_database_url(url: str) -> DatabaseUrl:
    """Parse ``url`` the way libpq would; ``ValueError(problem)`` when libpq would refuse it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"is not a valid URL ({EXPECTED})") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(f"must be a postgresql:// URL ({EXPECTED})")
    if parts.fragment:
        raise ValueError("must not contain a '#' fragment")
    # The netloc by hand: urlsplit takes everything after the last ':' as one port.
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    user = password = None
    if at:
        name, sep, secret = userinfo.partition(":")
        user = unquote(name)
        password = unquote(secret) if sep else None
    query = tuple(parse_qsl(parts.query, keep_blank_values=True))
    params = dict(query)  # libpq keeps the last value of a repeated parameter, as dict() does
    entries = [_split_host(entry) for entry in hostlist.split(",")] if hostlist else []
    hosts = [h for h, _ in entries] or [""]
    ports = [p for _, p in entries] if any(p for _, p in entries) else []
    # Query parameters override the netloc's values, keyword by keyword, as in libpq.
    if params.get("host") or params.get("hostaddr"):
        hosts = (params.get("host") or params["hostaddr"]).split(",")
    if params.get("port"):
        ports = params["port"].split(",")
    paired = _pair_hosts(hosts, ports)
    if params.get("password"):
        password = params["password"]
    if params.get("user"):
        user = params["user"]
    dbname = params.get("dbname") or unquote(parts.path.lstrip("/"))
    if not dbname:
        raise ValueError(f"names no database ({EXPECTED})")
    return DatabaseUrl(scheme=parts.scheme, user=user, password=password, hosts=paired, dbname=dbname,
                       query=query, user_text=userinfo.partition(":")[0] if at else None,
                       password_in_userinfo=bool(at and ":" in userinfo), host_text=hostlist,
                       path_text=parts.path)


def redact_database_url(url: str) -> str:
    """``url`` with its passwords replaced by ``***``; a URL that does not parse is not shown at all."""
    try:
        return parse_database_url(url).redacted()
    except ValueError:
        return "<unparseable database URL>"
