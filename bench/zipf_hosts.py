"""A thousand hosts of Zipf-distributed sizes behind one nginx: does a crawl of many small
hosts and a few big ones come close to what politeness allows, standalone and with
three engines on Redis?

Usage: .venv/bin/python bench/zipf_hosts.py [--hosts 1000] [--pages 100000]
       [--latency 0.02] [--delays 0] [--engines 1,3] [--rounds 1] [--out FILE]
       (and the other options of ``bench/many_hosts.py``)

Host k (k = 1 .. ``--hosts``) has about ``pages / (k H)`` pages (H the harmonic number:
a Zipf law of exponent 1), at least one, on a loopback address of its own (127.0.1.1,
..., 250 in each /24), served by one nginx (``nginx-light`` and
``libnginx-mod-http-echo``), every answer held back ``--latency`` seconds. Page n of a
host links to its pages 2n+1 and 2n+2 and to one page of another host, drawn at random
(seeded): the crawl starts from every host's ``/index.html``, and links between hosts
cross between engines as they would in a real crawl. The sites are written once to
``/tmp/zipf-sites-HOSTS-PAGES`` and kept.

Each crawl prints one JSON line: wall, CPU (engines and Redis) and CPU a page, the
politeness bound (the largest host's pages x max(latency / slots, delay)) and the
ratio to it, the largest host's finish against its own bound, Redis round trips and
commands a page, duplicates at the server, and the five largest hosts in detail.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from many_hosts import ECHO_MODULE, addresses, arguments, run


def sizes(hosts: int, pages: int) -> list[int]:
    """Pages of each host, largest first: a Zipf law of exponent 1 over ``hosts`` hosts."""
    harmonic = sum(1 / k for k in range(1, hosts + 1))
    return [max(1, round(pages / (k * harmonic))) for k in range(1, hosts + 1)]


def page_name(number: int) -> str:
    return "index.html" if number == 0 else f"p{number}.html"


def write_sites(root: Path, bases: list[str], counts: list[int], seed: int = 7) -> None:
    """Each host's pages under ``root/hNNNN``: a binary tree from index.html, and on
    every page one link to a random page of another host (``bases``: their URLs)."""
    rng = random.Random(seed)
    filler = "<p>" + "Lorem ipsum dolor sit amet. " * 20 + "</p>"
    for host, count in enumerate(counts):
        folder = root / f"h{host:04d}"
        folder.mkdir(parents=True)
        for number in range(count):
            other = rng.randrange(len(counts) - 1)
            other += other >= host  # any host but this one
            away = f"{bases[other]}/{page_name(rng.randrange(counts[other]))}"
            links = [page_name(n) for n in (2 * number + 1, 2 * number + 2) if n < count]
            anchors = "".join(f'<a href="{href}">{href}</a>\n' for href in [*links, away])
            html = (
                f"<!doctype html><html><head><title>host {host} page {number}</title>"
                f"</head><body><h1>Page {number}</h1>{filler}\n{anchors}</body></html>\n"
            )
            (folder / page_name(number)).write_text(html)


def shown(counts: list[int], latency: float, slots: int) -> Any:
    """What a crawl's row keeps: the totals, the largest host against its own bound, and
    the five largest hosts (a thousand hosts' timelines would drown the line)."""

    def keep(row: dict[str, Any]) -> dict[str, Any]:
        hosts = row.pop("hosts")
        largest = max(hosts.values(), key=lambda h: h["pages"])
        bound = largest["pages"] * max(latency / slots, row["delay"])
        row["hosts_served"] = len(hosts)
        row["largest_host"] = {
            "pages": largest["pages"],
            "done_at": largest["done_at"],
            "bound": round(bound, 2),
            "ratio_to_bound": round(largest["done_at"] / bound, 3),
            "first_start": largest["first_start"],
            "busy_share": largest["busy_share"],
        }
        row["cpu_per_page_ms"] = round(1000 * row["cpu"] / max(row["served"], 1), 2)
        row["expected_pages"] = sum(counts)
        row["top_hosts"] = {
            name: {k: v for k, v in h.items() if k != "timeline"}
            for name, h in sorted(hosts.items(), key=lambda kv: -kv[1]["pages"])[:5]
        }
        row.pop("engine_cpu_per_5s", None)
        return row

    return keep


def main() -> None:
    parser = arguments(__doc__.splitlines()[0], 8580)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=100_000)
    parser.set_defaults(delays="0", rounds=1)
    args = parser.parse_args()
    if not Path(ECHO_MODULE).exists():
        raise SystemExit(f"missing: {ECHO_MODULE} (see bench/many_hosts.py's docstring)")
    counts = sizes(args.hosts, args.pages)
    where = addresses(args.hosts)
    root = Path(f"/tmp/zipf-sites-{args.hosts}-{args.pages}")
    if not root.is_dir():
        partial = root.with_suffix(".partial")
        write_sites(partial, [f"http://{a}:{args.port}" for a in where], counts)
        partial.rename(root)
    sites = [(a, f"h{n:04d}", str(root / f"h{n:04d}")) for n, a in enumerate(where)]
    run(args, sites, shown(counts, args.latency, args.per_host))


if __name__ == "__main__":
    main()
