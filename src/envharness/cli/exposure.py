"""Who may call a command that listens (`serve`, `policy`) beyond loopback: one group of options,
declared once (`core/declared.py`), with its rule (the origin `null` only when forced) and the
warnings said at start (`core/guards.py`, docs/security.md).

Light to import: `serve` reads it for `--help`; the guards load when a server starts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from envharness.core.declared import option


def names(text: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']."""
    return [item.strip() for item in text.split(",") if item.strip()]


def host() -> Any:
    """`--host`: the interface a listening command binds."""
    return option("127.0.0.1", "interface to bind (default 127.0.0.1; 0.0.0.0 exposes it)")


@dataclass(frozen=True)
class ExposureArgs:
    """Host names and web page origins served besides loopback and the server's own."""

    group: ClassVar[str] = "exposure"

    allowed_hosts: list[str] = option(
        [],
        "Host names served besides loopback and the bound address ('*': any; behind a proxy or a cluster DNS name)",
        type=names,
        metavar="H1,H2",
    )
    allowed_origins: list[str] = option(
        [],
        "web page origins (https://site) allowed to call the server besides its own ('*': any)",
        type=names,
        metavar="O1,O2",
    )
    allow_null_origin: bool = option(
        False, "let --allowed-origins name 'null' (every sandboxed frame and file:// page of any site)"
    )

    def rules(self) -> None:
        """The origin `null` only with `--allow-null-origin` (ValueError in words)."""
        from envharness.core.guards import checked_origins

        checked_origins(self.allowed_origins, allow_null=self.allow_null_origin)

    def say_exposure(self, token: str | None, prog: str) -> None:
        """Say at start what the hosts and origins allowed open to the web pages the user visits."""
        from envharness.core.guards import checked_origins, exposure_warnings

        origins = checked_origins(self.allowed_origins, allow_null=self.allow_null_origin)
        for warning in exposure_warnings(self.allowed_hosts, origins, token):
            print(f"{prog}: warning: {warning}", file=sys.stderr, flush=True)
