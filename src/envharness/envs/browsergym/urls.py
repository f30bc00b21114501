"""URLs read as Chromium reads them: the WHATWG URL Standard's scheme, host and port.

The navigation checks (`engine.HostGuard`) must see the host the browser will connect to.
Python's `urllib` reads many spellings differently: `http://127.0.0.1:1\\@miniwob.local/` is
host `miniwob.local` to `urlsplit` and `127.0.0.1` to Chromium (a backslash ends the authority
of an http URL), tabs and newlines vanish inside a URL, `http://0x7f.1/` is 127.0.0.1, and
`%6c%6fcalhost` is `localhost`. This module follows the standard's basic URL parser as far as
the host goes (https://url.spec.whatwg.org/#concept-basic-url-parser): leading and trailing
C0 controls and spaces are stripped, tabs and newlines removed, `\\` is `/` in special schemes,
the host follows the last `@` of the authority, is percent-decoded, mapped by IDNA (UTS 46),
refused on a forbidden code point, and read as IPv4 when it ends in a number (hex, octal and
short forms) or as IPv6 in brackets (zone ids are invalid).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes, urljoin

SPECIAL_SCHEMES = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21, "file": None}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_SLASHES = "/\\"  # both end an http(s) URL's authority and start one
_FORBIDDEN_HOST = set("\0\t\n\r #/:<>?@[\\]^|")
_FORBIDDEN_DOMAIN = _FORBIDDEN_HOST | {chr(c) for c in range(0x20)} | {"%", "\x7f"}


class InvalidURL(ValueError):
    """A URL the standard's parser fails on (Chromium would not navigate to it)."""


@dataclass(frozen=True)
class ParsedURL:
    scheme: str
    #: The serialized host: a lower-case domain, dotted IPv4, or IPv6 in brackets; '' when none.
    host: str
    port: int | None = None

    @property
    def hostname(self) -> str:
        """The host without IPv6's brackets (what `urllib`'s `hostname` would be)."""
        return self.host[1:-1] if self.host.startswith("[") else self.host


def _clean(url: str) -> str:
    """The standard's first steps: C0 controls and spaces stripped, tabs and newlines removed."""
    text = url.strip("".join(chr(c) for c in range(0x21)))
    return text.replace("\t", "").replace("\n", "").replace("\r", "")


def resolve_url(base: str, reference: str) -> str:
    """`reference` (a redirect's `Location`, a link) resolved against `base` as the standard's
    parser does, far enough that `parse_url` of the result reads the host Chromium will go to.

    `urljoin` keeps `/\\host`, `\\\\host` and `http:\\\\host` on the base's host; against an
    http(s) base the standard reads any two of `/` and `\\` as the start of a new authority,
    `http:path` as relative to the base and `https:host` (another special scheme) as a host."""
    text, base_scheme = _clean(reference), parse_url(base).scheme
    if base_scheme not in SPECIAL_SCHEMES or base_scheme == "file":
        return urljoin(base, text)
    match = _SCHEME.match(text)
    if match is not None:
        scheme = match.group(1).lower()
        if scheme not in SPECIAL_SCHEMES or scheme == "file":
            return text  # an absolute URL of its own kind
        if scheme != base_scheme:
            return f"{scheme}://{text[match.end() :].lstrip(_SLASHES)}"
        text = text[match.end() :]  # the base's own scheme: relative to it
    if len(text) >= 2 and text[0] in _SLASHES and text[1] in _SLASHES:
        return f"{base_scheme}://{text.lstrip(_SLASHES)}"
    cut = min((i for i in (text.find("?"), text.find("#")) if i >= 0), default=len(text))
    return urljoin(base, text[:cut].replace("\\", "/") + text[cut:])  # same host: the path's backslashes


def parse_url(url: str) -> ParsedURL:
    """Scheme, host and port of `url` as Chromium reads them; raises `InvalidURL`."""
    text = _clean(url)
    match = _SCHEME.match(text)
    if match is None:
        raise InvalidURL(f"{url[:100]!r} has no scheme")
    scheme, rest = match.group(1).lower(), text[match.end() :]
    if scheme not in SPECIAL_SCHEMES:
        if not rest.startswith("//"):
            return ParsedURL(scheme, "")  # javascript:, data:, about:blank, ...: no host
        rest, ends = rest[2:], "/?#"
    else:
        rest, ends = rest.lstrip("/\\"), "/\\?#"
    authority = re.split("[" + re.escape(ends) + "]", rest, maxsplit=1)[0]
    host_port = authority.rpartition("@")[2]
    host_text, port = _split_port(host_port, url)
    if scheme == "file":
        return ParsedURL(
            scheme, "" if host_text.lower() == "localhost" else parse_host(host_text, special=True)
        )
    if not host_text and scheme in SPECIAL_SCHEMES:
        raise InvalidURL(f"{url[:100]!r} has an empty host")
    return ParsedURL(scheme, parse_host(host_text, special=scheme in SPECIAL_SCHEMES), port)


def _split_port(host_port: str, url: str) -> tuple[str, int | None]:
    in_brackets, cut = False, None
    for i, char in enumerate(host_port):
        if char == "[":
            in_brackets = True
        elif char == "]":
            in_brackets = False
        elif char == ":" and not in_brackets:
            cut = i
            break
    if cut is None:
        return host_port, None
    digits = host_port[cut + 1 :]
    if digits and not (digits.isdigit() and digits.isascii()):
        raise InvalidURL(f"{url[:100]!r} has an invalid port {digits[:20]!r}")
    if digits and int(digits) > 65535:
        raise InvalidURL(f"{url[:100]!r} has a port out of range")
    return host_port[:cut], int(digits) if digits else None


def parse_host(text: str, *, special: bool = True) -> str:
    """The standard's host parser: the serialized host, or `InvalidURL`."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise InvalidURL(f"unclosed IPv6 address {text[:60]!r}")
        return f"[{_ipv6(text[1:-1])}]"
    if not special:  # an opaque host: kept as written
        if any(c in _FORBIDDEN_HOST for c in text):
            raise InvalidURL(f"forbidden code point in host {text[:60]!r}")
        return text
    domain = unquote_to_bytes(text).decode("utf-8", errors="replace")
    ascii_domain = _domain_to_ascii(domain)
    if not ascii_domain or any(c in _FORBIDDEN_DOMAIN for c in ascii_domain):
        raise InvalidURL(f"invalid host {text[:60]!r}")
    if _ends_in_a_number(ascii_domain):
        return _ipv4(ascii_domain)
    return ascii_domain


def _domain_to_ascii(domain: str) -> str:
    if domain.isascii():
        return domain.lower()
    import idna

    try:
        return idna.encode(domain, uts46=True, transitional=False).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError) as exc:
        raise InvalidURL(f"invalid international host {domain[:60]!r}: {exc}") from None


def _ends_in_a_number(domain: str) -> bool:
    parts = domain.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    last = parts[-1]
    if last and last.isdigit() and last.isascii():
        return True
    return _ipv4_number(last) is not None


def _ipv4_number(part: str) -> int | None:
    if not part:
        return None
    radix = 10
    if part[:2].lower() == "0x":
        part, radix = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        part, radix = part[1:], 8
    if part == "":
        return 0
    try:
        return int(part, radix) if part.isascii() and part.isalnum() else None
    except ValueError:
        return None


def _ipv4(domain: str) -> str:
    parts = domain.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        raise InvalidURL(f"invalid IPv4 address {domain[:60]!r}")
    numbers = [_ipv4_number(p) for p in parts]
    if any(n is None for n in numbers):
        raise InvalidURL(f"invalid IPv4 address {domain[:60]!r}")
    values = [int(n) for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise InvalidURL(f"IPv4 address out of range {domain[:60]!r}")
    address = values[-1] + sum(n * 256 ** (3 - i) for i, n in enumerate(values[:-1]))
    return str(ipaddress.IPv4Address(address))


def _ipv6(text: str) -> str:
    if "%" in text:  # the standard has no zone ids
        raise InvalidURL(f"IPv6 zone ids are not valid in URLs: {text[:60]!r}")
    try:
        return ipaddress.IPv6Address(text).compressed
    except ValueError as exc:
        raise InvalidURL(f"invalid IPv6 address {text[:60]!r}: {exc}") from None
