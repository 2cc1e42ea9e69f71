"""html5lib-tests' encoding cases (``tests/data/html5lib-encoding/*.dat``): a page and
the encoding the HTML Standard's sniffing picks for it, served with no charset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

DATA = Path(__file__).parent / "data" / "html5lib-encoding"


def cases() -> Iterator[tuple[str, bytes, str]]:
    """``(file and index, body, expected label)`` for every case of every file."""
    for path in sorted(DATA.glob("*.dat")):
        chunks = path.read_bytes().split(b"#data\n")[1:]
        for index, chunk in enumerate(chunks):
            body, _, rest = chunk.partition(b"\n#encoding\n")
            yield f"{path.name}:{index}", body, rest.split(b"\n")[0].decode().strip()
