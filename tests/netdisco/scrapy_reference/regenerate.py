"""Write expected/*.jsonl: the items real Scrapy writes for each reference crawl.

The files were produced by running this once with Scrapy 2.19.0 (the ``scrapy-reference``
extra) and, for the spiders that only define ``start_requests`` (which Scrapy 2.19 no
longer calls: it crawls nothing, silently), Scrapy 2.12.0. The tests compare netdisco's
items with them, so Scrapy is never needed to test. To produce them again (after a
spider or the site changed)::

    python3 -m venv /tmp/scrapyref && /tmp/scrapyref/bin/pip install -c requirements.lock scrapy
    python3 -m venv /tmp/scrapy212
    /tmp/scrapy212/bin/pip install "scrapy==2.12.*" "w3lib<2.3" "twisted<25"
    .venv/bin/python -m tests.netdisco.scrapy_reference.regenerate \
        /tmp/scrapyref/bin/scrapy /tmp/scrapy212/bin/scrapy

Scrapy runs each spider file unchanged (``scrapy runspider``) and the project's spider
by name (``scrapy crawl`` in bookproj/), against the same loopback site.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.netdisco.scrapy_reference.runs import PROJECT, RUNS, SPIDERS, Run, normalised
from tests.netdisco.scrapy_reference.site import serve


async def scrapy_items(scrapy: str, run: Run, site: str, out: Path) -> str:
    """Run one reference crawl with Scrapy; the items it wrote."""
    args = [f"-a{name}={value}" for name, value in {"site": site, **run.args}.items()]
    if run.name == "api":
        args.append(f"-aclosed_file={out.with_suffix('.closed')}")
    if run.in_project:
        command, cwd = [scrapy, "crawl", run.spider], PROJECT
    else:
        command, cwd = [scrapy, "runspider", str(SPIDERS / run.spider.split(":")[0])], SPIDERS
    process = await asyncio.create_subprocess_exec(
        *command, *args, "-O", f"{out}:jsonl", "-s", "LOG_LEVEL=WARNING", cwd=cwd
    )
    if await process.wait() != 0:
        raise SystemExit(f"scrapy failed on {run.name}")
    return await asyncio.to_thread(out.read_text, encoding="utf-8")


async def main(scrapy: str, legacy: str) -> None:
    runner, site = await serve()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for run in RUNS:
                out = Path(scratch) / f"{run.name}.jsonl"
                text = await scrapy_items(legacy if run.legacy else scrapy, run, site, out)
                lines = normalised(text, site)
                run.expected.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
                print(f"{run.expected.name}: {len(lines)} items")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
