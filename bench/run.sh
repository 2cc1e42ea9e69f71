#!/usr/bin/env bash
# `make bench`: the crawl benchmark of bench/harness with netdisco beside Scrapy and the
# bare aiohttp+parsel loop, in one run on one machine. The harness is copied into
# bench/work/ (the harness stays as it came); its venvs come from its pinned lock files.
#   BENCH_ARGS="--pages 20000 --rounds 3"   passed to bench.py (see its --help)
#   BENCH_CRAWLERS="scrapy,aio"             add crawlee if you want it (slow to install)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
src=${BENCH_SRC:-$here/harness}
work=$here/work
[ -f "$src/bench.py" ] || { echo "bench harness not found at $src (set BENCH_SRC)" >&2; exit 1; }

mkdir -p "$work"
for f in bench.py gen_site.py slow_server.py nginx.conf.template crawlers requirements; do
    cp -r "$src/$f" "$work/"
done

# netdisco obeys robots.txt (the harness's other crawlers do not), so nginx serves one
# request more than there are pages; the crawler reports it as "robots_requests" in its
# BENCH_RESULT and the verifier of this copy subtracts it. Nothing else is changed.
sed -i 's/^\(        served = req1 - req0 - (1 if scenario\["status_kind"\] == "nginx" else 0)\)$/\1 - int(bench.get("robots_requests", 0))/' "$work/bench.py"
grep -q 'bench.get("robots_requests"' "$work/bench.py" || { echo "could not patch bench.py" >&2; exit 1; }

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light wrk
fi
IFS=, read -r -a crawlers <<< "${BENCH_CRAWLERS:-scrapy,aio}"
for c in "${crawlers[@]}"; do
    if [ ! -x "$work/venv-$c/bin/python" ]; then
        python3 -m venv "$work/venv-$c"
        "$work/venv-$c/bin/pip" install -q -r "$work/requirements/$c.lock.txt"
    fi
done

cd "$work"
# shellcheck disable=SC2086
exec python3 bench.py --crawlers "${BENCH_CRAWLERS:-scrapy,aio}" --reference scrapy \
    --add "netdisco=$top/.venv/bin/python $here/netdisco_crawler.py" ${BENCH_ARGS:-}
