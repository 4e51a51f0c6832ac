"""Worker hosts as Linux network namespaces: each is joined to this machine by a veth
pair of its own (a /30 of 10.231.0.0/16), reaches the database only at the address of its
pair's outer end, and can be cut off (`partition`) and healed. Needs root and iproute2's
`ip`; no packet leaves this machine (the namespaces have no route but their /30).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

#: Why these tests cannot run here, or None when they can.
MISSING = (
    "not root"
    if os.geteuid() != 0
    else "no `ip` (iproute2)"
    if shutil.which("ip") is None
    else None
)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class Host:
    """One namespace: `inside` is its own address, `database` the address it reaches the
    database at (the outer end of its veth pair, on this machine)."""

    name: str
    outer_device: str
    inside: str
    database: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace (`ip netns exec` execs it: the pid is its)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def partition(self) -> None:
        """Drop every packet between the host and the database, both ways, silently (a
        blackhole route each side), as a cut cable or a dead switch would."""
        ip("netns", "exec", self.name, "ip", "route", "add", "blackhole", f"{self.database}/32")
        ip("route", "add", "blackhole", f"{self.inside}/32")

    def heal(self) -> None:
        ip("netns", "exec", self.name, "ip", "route", "del", "blackhole", f"{self.database}/32")
        ip("route", "del", "blackhole", f"{self.inside}/32")


@contextmanager
def hosts(count: int) -> Iterator[list[Host]]:
    """`count` namespaces, removed (with their veths and routes) on the way out."""
    tag = f"{os.getpid() % 100000}"
    subnet = random.Random().randrange(1, 250)  # a parallel run is unlikely to pick it too
    with ExitStack() as undo:
        made = []
        for i in range(count):
            name, outer, inner = f"qc{tag}n{i}", f"qc{tag}o{i}", f"qc{tag}i{i}"
            base = 4 * i
            database, inside = f"10.231.{subnet}.{base + 1}", f"10.231.{subnet}.{base + 2}"
            ip("netns", "add", name)
            undo.callback(ip, "netns", "del", name)
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            undo.callback(subprocess.run, ["ip", "link", "del", outer], capture_output=True)
            ip("link", "set", inner, "netns", name)
            ip("addr", "add", f"{database}/30", "dev", outer)
            ip("link", "set", outer, "up")
            inside_ip = ("netns", "exec", name, "ip")
            ip(*inside_ip, "addr", "add", f"{inside}/30", "dev", inner)
            ip(*inside_ip, "link", "set", inner, "up")
            ip(*inside_ip, "link", "set", "lo", "up")
            made.append(Host(name, outer, inside, database))
        yield made
