"""Where webhooks may go: the operator's allow-list, and the hosts a header secret is bound to.

A DAG author names webhook URLs, and the leader posts to them from inside the cluster: without
a policy a rule pointing at ``http://127.0.0.1:5432/`` or ``http://kubernetes.default/`` turns
the leader into the author's client on the internal network. :class:`DestinationPolicy` decides,
for a host name *and each address it resolved to*, whether a delivery may connect there; the
deliverer asks it at connect time (:mod:`leoflow.notify.transport`), on the addresses it then
connects to, so a name that resolves differently the second time (DNS rebinding) gains nothing.

``LEOFLOW_NOTIFY_ALLOWED_HOSTS`` is a comma-separated list of patterns, matched without
regular expressions (each check is linear in the list):

- ``public`` — any host whose every address is a public one (the default, alone): not
  loopback, link-local, private (RFC 1918, ULA), shared (CGNAT ``100.64.0.0/10``), unspecified,
  multicast or reserved, not the cluster's API service address (``KUBERNETES_SERVICE_HOST``),
  and not a cluster-internal name (``localhost``, ``kubernetes``, ``*.svc``, ``*.cluster.local``,
  ``*.localhost``, a name without a dot);
- ``alerts.example.com`` or ``*.example.com`` — that name, or any name under that domain
  (``*.example.com`` does not match ``example.com`` itself), whatever it resolves to: the
  operator vouches for its DNS;
- ``10.1.2.3``, ``10.1.0.0/16``, ``fd00::/8`` — any host resolving (only) into those addresses.

A header secret (``LEOFLOW_NOTIFY_HEADER_<NAME>``) is sent only to the hosts of
``LEOFLOW_NOTIFY_HOSTS_<NAME>`` (the same name and IP patterns, no ``public``), and, without
such a binding, only to the host of ``LEOFLOW_NOTIFY_WEBHOOK``: never to a URL a DAG author
chose (:func:`header_may_go_to`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The pattern that admits public addresses.
PUBLIC = "public"
#: Most patterns in one list (a list is matched linearly, per delivery).
MAX_PATTERNS = 100
MAX_PATTERN_LENGTH = 253
#: Names that always mean "this machine" or "this cluster" (exact, or as a parent domain).
_INTERNAL_NAMES = ("localhost", "kubernetes", "kubernetes.default")
_INTERNAL_SUFFIXES = (".localhost", ".svc", ".cluster.local", ".internal")
#: Ranges Python's ``is_global`` does not cover, refused by the public check anyway.
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


@dataclass(frozen=True)
class HostPatterns:
    """Host names (``names``: exact; ``domains``: a ``*.`` pattern's parent, matched as a suffix)
    and address ranges; an empty set matches nothing."""

    names: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()

    def matches_name(self, host: str) -> bool:
        host = normal_host(host)
        return host in self.names or any(host.endswith("." + d) for d in self.domains)

    def matches_address(self, address: Address) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)

    def matches_host(self, host: str) -> bool:
        """A URL's host: by name, or, for an IP literal, by address."""
        literal = ip_literal(host)
        return self.matches_address(literal) if literal is not None else self.matches_name(host)


@dataclass(frozen=True)
class DestinationPolicy:
    """``LEOFLOW_NOTIFY_ALLOWED_HOSTS`` parsed (see the module docstring)."""

    public: bool = True
    patterns: HostPatterns = field(default_factory=HostPatterns)
    #: Addresses refused even when public (the cluster's API service address).
    refused: frozenset[Address] = frozenset()

    def with_refused(self, *addresses: str | None) -> DestinationPolicy:
        """This policy also refusing ``addresses`` (blank and unparsable entries ignored)."""
        parsed = {a for a in (ip_literal(x) for x in addresses if x) if a is not None}
        return DestinationPolicy(self.public, self.patterns, self.refused | frozenset(parsed))

    def may_resolve(self, host: str) -> bool:
        """Could ``host`` be permitted at any address? (False: refuse it without a DNS query.)"""
        if ip_literal(host) is not None or self.patterns.networks or self.patterns.matches_name(host):
            return True
        return self.public and not is_internal_name(host)

    def permits(self, host: str, address: Address) -> bool:
        """May a delivery to the URL host ``host`` connect to ``address`` (one it resolved to)?"""
        address = _unwrapped(address)
        if self.patterns.matches_address(address):
            return True
        if ip_literal(host) is None and self.patterns.matches_name(host):
            return True
        return self.public and is_public_address(address) and address not in self.refused \
            and not is_internal_name(host)


def parse_allowed_hosts(value: str) -> DestinationPolicy:
    """``LEOFLOW_NOTIFY_ALLOWED_HOSTS`` (ValueError naming the bad pattern)."""
    entries = _entries(value)
    public = PUBLIC in entries
    return DestinationPolicy(public=public, patterns=parse_host_patterns([e for e in entries if e != PUBLIC]))


def parse_host_patterns(entries: list[str] | str) -> HostPatterns:
    """Names, ``*.`` domains, IPs and CIDRs (ValueError naming the bad one)."""
    if isinstance(entries, str):
        entries = _entries(entries)
    names: set[str] = set()
    domains: list[str] = []
    networks: list[Network] = []
    for entry in entries:
        if "/" in entry or ip_literal(entry) is not None:
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or CIDR") from None
        elif entry.startswith("*."):
            domains.append(_host_name(entry[2:], entry))
        else:
            names.add(_host_name(entry, entry))
    return HostPatterns(frozenset(names), tuple(domains), tuple(networks))


def header_may_go_to(url_host: str, binding: HostPatterns | None, default_webhook_host: str | None) -> bool:
    """May a header secret be sent to ``url_host``? Bound: to its hosts; unbound: only to the
    operator's own webhook host (see the module docstring)."""
    if binding is not None:
        return binding.matches_host(url_host)
    return default_webhook_host is not None and normal_host(url_host) == normal_host(default_webhook_host)


def is_public_address(address: Address) -> bool:
    address = _unwrapped(address)
    return not (address.is_loopback or address.is_link_local or address.is_private or address.is_multicast
                or address.is_reserved or address.is_unspecified or address in _SHARED
                or (address.version == 6 and address.is_site_local) or not address.is_global)


def is_internal_name(host: str) -> bool:
    """A name that means this machine or this cluster (a single label resolves via the pod's
    search domains to a Service of its namespace)."""
    host = normal_host(host)
    if ip_literal(host) is not None:
        return False
    return "." not in host or host in _INTERNAL_NAMES or host.endswith(_INTERNAL_SUFFIXES)


def normal_host(host: str) -> str:
    return host.strip().rstrip(".").lower()


def ip_literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip().strip("[]"))
    except ValueError:
        return None


def _unwrapped(address: Address) -> Address:
    """The IPv4 address inside an IPv4-mapped, 6to4 or NAT64 IPv6 address (judged as itself)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _entries(value: str) -> list[str]:
    entries = [e.strip().lower() for e in value.split(",") if e.strip()]
    if len(entries) > MAX_PATTERNS:
        raise ValueError(f"has {len(entries)} patterns; at most {MAX_PATTERNS} are allowed")
    for entry in entries:
        if len(entry) > MAX_PATTERN_LENGTH:
            raise ValueError(f"has a pattern longer than {MAX_PATTERN_LENGTH} characters")
    return entries


def _host_name(name: str, entry: str) -> str:
    name = name.rstrip(".")
    if not name or not set(name) <= _NAME_CHARS or ".." in name or name.startswith((".", "-")):
        raise ValueError(f"{entry!r} is not a host name, *.domain, IP address or CIDR")
    return name
