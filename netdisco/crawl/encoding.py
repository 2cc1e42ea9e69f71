"""Which encoding a page is in: the HTML Standard's encoding sniffing algorithm.

In order: a byte-order mark; the Content-Type header's charset; a ``<meta>`` found by
the standard's prescan of the first 1,024 bytes (then of the rest, as a browser's
parser changes the encoding when it meets a later ``<meta>``); for a body left
undeclared that is not ASCII, UTF-8 if it decodes, else charset-normalizer's guess
among the web's encodings; windows-1252. Labels are the WHATWG Encoding Standard's
(``webencodings``): ``latin1`` is windows-1252, a UTF-16 declared in a ``<meta>`` is
UTF-8 (an ASCII-compatible page cannot be UTF-16), ``x-user-defined`` there is
windows-1252.
"""

from __future__ import annotations

import bisect
import codecs
import re
from dataclasses import dataclass

import webencodings
from charset_normalizer import from_bytes

#: how far the first prescan looks, as the standard says
PRESCAN_BYTES = 1024
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_BE, "utf-16be"), (b"\xff\xfe", "utf-16le"))
_SPACE = b"\t\n\x0c\r "
_CHARSET = re.compile(rb"charset\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s;\"']+))", re.I)


def _named(name: str) -> webencodings.Encoding:
    encoding = webencodings.lookup(name)
    assert encoding is not None, name
    return encoding


UTF_8, WINDOWS_1252 = _named("utf-8"), _named("windows-1252")

#: Python's names for web encodings that are no WHATWG label of theirs
_PYTHON_NAMES = {"cp932": "shift_jis", "cp949": "euc-kr", "mac-roman": "macintosh"}
#: how far the later scan looks for a ``<meta>`` past the first 1,024 bytes
LATE_META_BYTES = 65536
_COMMENT = re.compile(rb"<!--.*?(?:-->|\Z)", re.S)
_META = re.compile(rb"<meta(?=[\t\n\x0c\r /])", re.I)
_TAG = re.compile(rb"<(?:!--|meta[\t\n\x0c\r /]|/?[a-z]|[!/?])", re.I)


@dataclass(frozen=True)
class Sniffed:
    """The encoding picked (its WHATWG name) and why: ``bom``, ``header``, ``meta``,
    ``detected`` or ``default``."""

    encoding: webencodings.Encoding
    reason: str

    def decode(self, body: bytes) -> str:
        """The body as text; bytes the encoding cannot read become U+FFFD."""
        if self.reason == "bom":
            body = body[len(_bom(body)[0]) :]
        text: str = self.encoding.codec_info.decode(body, "replace")[0]
        return text


def sniff(body: bytes, content_type: str = "") -> Sniffed:
    """The encoding of an HTML ``body`` served with ``content_type``."""
    bom, name = _bom(body)
    if bom:
        return Sniffed(_named(name), "bom")
    header = _charset_of(content_type.encode("latin-1", "replace"))
    if header is not None:
        return Sniffed(header, "header")
    declared = prescan(body[:PRESCAN_BYTES])
    if declared is None and len(body) > PRESCAN_BYTES:  # as the parser meets a later one
        declared = _later_meta(body[:LATE_META_BYTES])
    if declared is not None:
        return Sniffed(declared, "meta")
    detected = _detect(body)
    if detected is not None:
        return Sniffed(detected, "detected")
    return Sniffed(WINDOWS_1252, "default")


def _bom(body: bytes) -> tuple[bytes, str]:
    for bom, name in _BOMS:
        if body.startswith(bom):
            return bom, name
    return b"", ""


def _charset_of(value: bytes) -> webencodings.Encoding | None:
    """The encoding a ``charset=`` in a Content-Type names (the standard's algorithm for
    extracting a character encoding from a ``<meta>`` content; an unknown label: None)."""
    match = _CHARSET.search(value)
    if match is None:
        return None
    label = next(group for group in match.groups() if group is not None)
    return webencodings.lookup(label.decode("latin-1"))


def _detect(body: bytes) -> webencodings.Encoding | None:
    """For an undeclared body that is not ASCII: UTF-8 if it decodes, else the best of
    charset-normalizer's guesses that the web knows (never ``johab``)."""
    if body.isascii():
        return None
    try:
        body.decode("utf-8")
        return UTF_8
    except UnicodeDecodeError:
        pass
    for match in from_bytes(body[:65536]):
        name = codecs.lookup(match.encoding).name
        name = _PYTHON_NAMES.get(name, name)
        found = webencodings.lookup(name) or webencodings.lookup(name.replace("_", "-"))
        if found is not None and found.name != "replacement":
            return found
    return None


def prescan(data: bytes) -> webencodings.Encoding | None:
    """The standard's prescan of ``data`` for a ``<meta>`` that declares the encoding."""
    position = 0
    while (found := _TAG.search(data, position)) is not None:
        start, token = found.start(), found.group().lower()
        if token == b"<!--":
            end = data.find(b"-->", start + 2)
            position = len(data) if end < 0 else end + 3
        elif token.startswith(b"<meta"):
            encoding, position = _meta(data, start + 5)
            if encoding is not None:
                return encoding
        elif token[-1:].isalpha():  # a tag: its name, then its attributes, are skipped
            position = _skip_tag(data, start + len(token))
        else:  # <!, </ not followed by a letter, <?: to the next >
            end = data.find(b">", start + 1)
            position = len(data) if end < 0 else end + 1
    return None


def _later_meta(data: bytes) -> webencodings.Encoding | None:
    """The first declaring ``<meta>`` outside comments: what a browser's parser meets
    past the prescan (found with regular expressions, so that a long page costs little)."""
    comments = [(m.start(), m.end()) for m in _COMMENT.finditer(data)]
    starts = [start for start, _ in comments]
    for meta in _META.finditer(data):
        index = bisect.bisect_right(starts, meta.start()) - 1
        if index >= 0 and meta.start() < comments[index][1]:
            continue
        encoding, _ = _meta(data, meta.end())
        if encoding is not None:
            return encoding
    return None


def _skip_tag(data: bytes, position: int) -> int:
    while position < len(data) and data[position] not in b"\t\n\x0c\r >":
        position += 1
    while (attribute := _attribute(data, position)) is not None:
        position = attribute[2]
    return position + 1


def _meta(data: bytes, position: int) -> tuple[webencodings.Encoding | None, int]:
    """A ``<meta>``'s declaration (``charset``, or ``http-equiv=content-type`` with a
    ``content`` naming a charset) and where the scan goes on."""
    seen: set[bytes] = set()
    pragma, need_pragma, charset = False, None, None
    while (attribute := _attribute(data, position)) is not None:
        name, value, position = attribute
        if name in seen:
            continue
        seen.add(name)
        if name == b"http-equiv" and value == b"content-type":
            pragma = True
        elif name == b"content" and charset is None:
            charset = _charset_of(value)
            need_pragma = True if charset is not None else need_pragma
        elif name == b"charset":
            charset, need_pragma = webencodings.lookup(value.decode("latin-1")), False
    if need_pragma is None or (need_pragma and not pragma) or charset is None:
        return None, position
    if charset.name in ("utf-16be", "utf-16le"):
        return UTF_8, position
    if charset.name == "x-user-defined":
        return WINDOWS_1252, position
    return charset, position


def _attribute(data: bytes, position: int) -> tuple[bytes, bytes, int] | None:
    """The standard's "get an attribute": ``(name, value, position after)`` lowered to
    ASCII lower case, or None at ``>`` or the end."""
    end = len(data)
    while position < end and data[position] in b"\t\n\x0c\r /":
        position += 1
    if position >= end or data[position] == 0x3E:  # >
        return None
    name = bytearray()
    while position < end:
        byte = data[position]
        if byte == 0x3D and name:  # =
            return _value(data, position + 1, bytes(name))
        if byte in _SPACE:
            break
        if byte in b"/>":
            return bytes(name), b"", position
        name.append(byte | 0x20 if 0x41 <= byte <= 0x5A else byte)
        position += 1
    while position < end and data[position] in _SPACE:
        position += 1
    if position >= end or data[position] != 0x3D:
        return (bytes(name), b"", position) if position < end else None
    return _value(data, position + 1, bytes(name))


def _value(data: bytes, position: int, name: bytes) -> tuple[bytes, bytes, int] | None:
    end = len(data)
    while position < end and data[position] in _SPACE:
        position += 1
    if position >= end:
        return None
    quote = data[position]
    if quote in b"\"'":
        close = data.find(bytes([quote]), position + 1)
        if close < 0:
            return None
        return name, data[position + 1 : close].lower(), close + 1
    if quote == 0x3E:  # >
        return name, b"", position
    stop = position
    while stop < end and data[stop] not in b"\t\n\x0c\r >":
        stop += 1
    if stop >= end:
        return None
    return name, data[position:stop].lower(), stop
