"""Network namespaces for real partitions: a process in its own netns, cut off with iptables DROP.

A :class:`NetNamespace` is a Linux network namespace joined to the host by a veth pair with a
private /30 (``10.213.x.y``, chosen here and checked against the addresses already in use). A
process started through :meth:`NetNamespace.popen` (``ip netns exec``) reaches the host side at
``host_addr``; the host reaches it at ``ns_addr``. :meth:`partition` installs ``DROP`` rules
*inside* the namespace for both directions (optionally only one TCP port, e.g. PostgreSQL's), so
packets are silently lost: no RST, no ICMP. The peer across the veth therefore sees a *dead*
peer — exactly what a userspace proxy cannot simulate — and PostgreSQL drops the session only
after its TCP keepalive / user timeout. :meth:`heal` removes the rules.

Cleanup is unconditional: :func:`network_namespace` kills what still runs inside the namespace
and deletes it (and with it the veth pair and the rules) in a ``finally``, also when the body
fails. Namespaces are named ``leoflow-<owner pid>-<tag>``; :func:`cleanup_stale` removes those
whose owner died without cleaning up (SIGKILLed test runs).

:class:`VethPostgres` is a private PostgreSQL that also listens on the host side of given
namespaces (``listen_addresses`` takes a comma list) and trusts connections from them.

Needs root plus ``ip`` (iproute2) and ``iptables``; :func:`unavailable_reason` says why not.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leoflow.standalone.embedded import EmbeddedPostgres, free_port

logger = logging.getLogger(__name__)

NAME_PREFIX = "leoflow-"
PARTITION_CHAIN = "LEOFLOW_PARTITION"
#: Private block the /30 links are carved from (never routed off this machine).
LINK_BLOCK = ipaddress.ip_network("10.213.0.0/16")


class NetnsError(RuntimeError):
    """A namespace, veth or iptables command failed."""


def unavailable_reason() -> str | None:
    """Why network-namespace partitions cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root"
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package})"
    return None


def _cmd(argv: Sequence[str], *, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _addresses_in_use() -> list[ipaddress.IPv4Interface]:
    out = _cmd(["ip", "-o", "-4", "addr", "show"]).stdout
    return [ipaddress.IPv4Interface(m) for m in re.findall(r"inet (\d+\.\d+\.\d+\.\d+/\d+)", out)]


def _free_link(rng: random.Random) -> ipaddress.IPv4Network:
    used = _addresses_in_use()
    for _ in range(200):
        offset = rng.randrange(0, LINK_BLOCK.num_addresses, 4)
        link = ipaddress.IPv4Network((int(LINK_BLOCK.network_address) + offset, 30))
        if not any(link.overlaps(addr.network) for addr in used):
            return link
    raise NetnsError(f"no free /30 left in {LINK_BLOCK}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class NetNamespace:
    """One namespace plus its veth link to the host."""

    name: str
    host_if: str
    ns_if: str
    host_addr: str
    ns_addr: str
    partitioned: bool = False

    # ------------------------------------------------------------------ running things inside
    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.argv(argv), check=False, **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.argv(argv), **kwargs)

    def pids(self) -> list[int]:
        out = _cmd(["ip", "netns", "pids", self.name], check=False).stdout
        return [int(p) for p in out.split()]

    # ------------------------------------------------------------------ faults
    def partition(self, *, port: int | None = None) -> None:
        """Silently drop traffic to and from the host side (only TCP ``port`` when given)."""
        out_match = ["-d", self.host_addr] + (["-p", "tcp", "--dport", str(port)] if port else [])
        in_match = ["-s", self.host_addr] + (["-p", "tcp", "--sport", str(port)] if port else [])
        _cmd(self.argv(["iptables", "-w", "-A", PARTITION_CHAIN, *out_match, "-j", "DROP"]))
        _cmd(self.argv(["iptables", "-w", "-A", PARTITION_CHAIN, *in_match, "-j", "DROP"]))
        self.partitioned = True
        logger.info("partitioned", extra={"netns": self.name, "port": port})

    def heal(self) -> None:
        """Remove every partition rule; traffic flows again."""
        _cmd(self.argv(["iptables", "-w", "-F", PARTITION_CHAIN]))
        self.partitioned = False
        logger.info("healed", extra={"netns": self.name})

    def rules(self) -> str:
        return _cmd(self.argv(["iptables", "-w", "-S", PARTITION_CHAIN])).stdout

    # ------------------------------------------------------------------ lifecycle
    def _setup(self, link: ipaddress.IPv4Network) -> None:
        prefix = f"/{link.prefixlen}"
        _cmd(["ip", "netns", "add", self.name])
        _cmd(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if, "netns", self.name])
        _cmd(["ip", "addr", "add", self.host_addr + prefix, "dev", self.host_if])
        _cmd(["ip", "link", "set", self.host_if, "up"])
        _cmd(self.argv(["ip", "addr", "add", self.ns_addr + prefix, "dev", self.ns_if]))
        _cmd(self.argv(["ip", "link", "set", self.ns_if, "up"]))
        _cmd(self.argv(["ip", "link", "set", "lo", "up"]))
        _cmd(self.argv(["iptables", "-w", "-N", PARTITION_CHAIN]))
        _cmd(self.argv(["iptables", "-w", "-I", "INPUT", "-j", PARTITION_CHAIN]))
        _cmd(self.argv(["iptables", "-w", "-I", "OUTPUT", "-j", PARTITION_CHAIN]))

    def destroy(self) -> None:
        """Kill what still runs inside, delete the namespace and the veth pair. Never raises."""
        _destroy(self.name, self.host_if)


def _destroy(name: str, host_if: str | None) -> None:
    out = _cmd(["ip", "netns", "pids", name], check=False).stdout
    for pid in (int(p) for p in out.split()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _cmd(["ip", "netns", "del", name], check=False)
    if host_if:
        _cmd(["ip", "link", "del", host_if], check=False)


def list_namespaces() -> list[str]:
    out = _cmd(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def cleanup_stale() -> list[str]:
    """Delete ``leoflow-<pid>-*`` namespaces whose owner process is gone; returns their names."""
    removed = []
    for name in list_namespaces():
        m = re.fullmatch(re.escape(NAME_PREFIX) + r"(\d+)-([0-9a-f]+)", name)
        if m and not _pid_alive(int(m.group(1))):
            _destroy(name, f"lfh{m.group(2)}")
            removed.append(name)
    return removed


def create_namespace(rng: random.Random | None = None) -> NetNamespace:
    """A new namespace linked to the host; the caller must :meth:`~NetNamespace.destroy` it."""
    reason = unavailable_reason()
    if reason:
        raise NetnsError(reason)
    cleanup_stale()
    rng = rng or random.Random()
    tag = f"{rng.getrandbits(28):07x}"
    link = _free_link(rng)
    hosts = list(link.hosts())
    ns = NetNamespace(name=f"{NAME_PREFIX}{os.getpid()}-{tag}", host_if=f"lfh{tag}", ns_if=f"lfn{tag}",
                      host_addr=str(hosts[0]), ns_addr=str(hosts[1]))
    try:
        ns._setup(link)
    except BaseException:
        ns.destroy()
        raise
    return ns


@contextlib.contextmanager
def network_namespace() -> Iterator[NetNamespace]:
    """A namespace for the duration of the block, destroyed afterwards whatever happens."""
    ns = create_namespace()
    try:
        yield ns
    finally:
        ns.destroy()


@contextlib.contextmanager
def network_namespaces(count: int) -> Iterator[list[NetNamespace]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(network_namespace()) for _ in range(count)]


# --------------------------------------------------------------------------- PostgreSQL on the links

class VethPostgres(EmbeddedPostgres):
    """A private server on 127.0.0.1 *and* the host side of the given namespaces.

    ``url()`` stays on loopback (for the test itself); :meth:`url_from` is the address a process
    inside a namespace must use. ``pg_hba.conf`` trusts the namespaces' /30 links.
    """

    def __init__(self, data_dir: Path, namespaces: Sequence[NetNamespace], **kwargs: Any) -> None:
        kwargs.setdefault("port", free_port())
        super().__init__(data_dir, host="127.0.0.1", **kwargs)
        self.namespaces = list(namespaces)
        self.host = ",".join(["127.0.0.1", *(ns.host_addr for ns in self.namespaces)])

    def url(self, dbname: str = "postgres", *, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def url_from(self, ns: NetNamespace, dbname: str = "postgres", *, user: str = "postgres") -> str:
        return f"postgresql://{user}@{ns.host_addr}:{self.port}/{dbname}"

    def init(self) -> None:
        super().init()
        hba = self.data_dir / "pg_hba.conf"
        lines = hba.read_text()
        wanted = [f"host all all {ns.ns_addr}/32 trust" for ns in self.namespaces]
        missing = [line for line in wanted if line not in lines]
        if missing:
            with hba.open("a") as f:
                f.write("\n# leoflow test namespaces\n" + "\n".join(missing) + "\n")


@contextlib.contextmanager
def veth_postgres(namespaces: Sequence[NetNamespace], *, fast_unsafe: bool = True) -> Iterator[VethPostgres]:
    """A running :class:`VethPostgres`, stopped and removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="leoflow-pg-netns-"))
    base.chmod(0o755)
    pg = VethPostgres(base / "data", namespaces, fast_unsafe=fast_unsafe, socket_dir=base / "sock")
    try:
        pg.start()
        pg.wait_ready()
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def wait_until(predicate: Any, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
