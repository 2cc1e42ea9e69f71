"""Each host's slot and the requests waiting for it: a ready queue, as Mercator's back
queues (``ReadyHosts``), kept by the downloader when the frontier does not reserve hosts.

A worker is handed a request only when its host may start one *now*: a free slot and
its delay run out. A request whose host is not due is set aside in that host's queue,
and the worker takes another; the hosts with waiting requests sit in a heap by the time
each is next due, so the first host due is served first and no worker waits on one host
while another is ready. ``HostSlot.wait_turn`` still spaces the starts at the server.

Memory is bounded: at most ``limit`` requests wait aside in all (4 x ``concurrency``,
as before), and at most ``PER_HOST`` x a host's slots in one host's queue. Past those a
request goes back to the frontier (which may keep it on disk), so that one big host
cannot fill the room the other hosts need; after ``limit`` of those in a row nothing
more is taken until a request starts, and each later run may send half as many, until
a request taken starts at once (a crawl of busy hosts does not spin).

A request robots.txt is known to forbid is never set aside: it goes at once, takes no
slot and no turn, and is dropped before anything is sent (``RobotsDenied``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from netdisco.crawl.lru import LRU

if TYPE_CHECKING:
    from netdisco.crawl.request import Request
    from netdisco.crawl.throttle import Throttle

#: a host's queue holds at most this many times its slots
PER_HOST = 4
#: how soon a host whose robots.txt does not answer is looked at again (s)
UNREACHABLE_RECHECK = 0.25

#: what ``ReadyHosts.place`` decided: start it now, it waits aside, or to the frontier
Placement = Literal["go", "parked", "back"]


@dataclass(frozen=True, slots=True)
class Pace:
    """One decision of a host's pace, with the clock reading it was made on
    (``time.monotonic``), kept when ``ReadyHosts.record_paces`` asked for it:

    * ``turn``: a request may go now (``at``); it waited until ``due``, its host's next
      start then (``at >= due`` always);
    * ``start``: it went out at ``at``; nothing more of its host before ``due``;
    * ``rest``: the host rests from ``at`` until ``due`` (a 429, a 503, a failure);
      ``told``: the server said how long.

    Tests check the delays where they are decided, not where a loaded loop stamps them.
    """

    kind: Literal["turn", "start", "rest"]
    host: str
    at: float
    due: float
    told: bool = False


class HostSlot:
    """Politeness for one host: how many requests at once, when the next may start, and
    the requests set aside until it is due (``ReadyHosts``)."""

    __slots__ = (
        "active",
        "capacity",
        "entry",
        "host",
        "last_start",
        "mark",
        "next_start",
        "pending",
        "record",
        "semaphore",
        "starting",
        "throttle",
        "users",
        "waiting",
    )

    def __init__(self, host: str, throttle: Throttle) -> None:
        self.host, self.throttle = host, throttle  # its delay may change: asked each time
        self.capacity = throttle.concurrency(host)
        self.semaphore = asyncio.Semaphore(self.capacity)
        self.starting = asyncio.Lock()  # one request at a time waits out the delay
        self.next_start = 0.0
        self.last_start = 0.0  # when a request last went out (0: none yet)
        self.users = 0  # requests holding or waiting for the semaphore
        self.active = 0  # requests handed to workers (``Hold``), not ended
        self.pending = 0  # of those, with a delay, not yet at their turn
        self.waiting: deque[Request] = deque()
        self.entry: tuple[float, int] | None = None  # its live entry in the ready heap
        self.mark = 0.0  # when its idle share was last counted (``ReadyHosts._account``)
        self.record: list[Pace] | None = None  # its decisions (``ReadyHosts.record_paces``)

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.semaphore.acquire()
        except BaseException:
            self.users -= 1
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.semaphore.release()
        self.users -= 1

    def idle(self) -> bool:
        """Nobody uses it or waits for it, and its delay has run out: forgetting it
        changes nothing."""
        return (
            self.users == 0
            and self.active == 0
            and not self.waiting
            and self.next_start <= time.monotonic()
        )

    def delay(self) -> float:
        """The host's delay now (``Throttle.delay``)."""
        return self.throttle.delay(self.host)

    def due(self) -> float | None:
        """When a request handed out now would start without waiting (monotonic); None
        while every slot is held or a handed-out request has not had its turn yet."""
        if self.active >= self.capacity or self.pending:
            return None
        return self.next_start

    def rest(self, seconds: float, told: bool = False) -> None:
        """Start nothing for ``seconds`` (a 429, a 503, a failure): the whole host waits,
        not only the request that was told to. ``told``: the server said how long
        (Retry-After); the next start is then when it said, not later."""
        now = time.monotonic()
        until = now + seconds
        self.next_start = until if told else max(self.next_start, until)
        if self.record is not None:
            self.record.append(Pace("rest", self.host, now, self.next_start, told))

    def answered(self) -> None:
        """A transfer to the host ended: with a delay, the next start also waits it from
        here. The site read this request before it answered, so it then never sees two
        starts closer than the delay, however late it read this one or early the
        next went out (Heritrix and Nutch count their delays from a fetch's end too)."""
        if (delay := self.delay()) > 0:
            self.next_start = max(self.next_start, time.monotonic() + delay)

    def went_out(self, at: float) -> None:
        """A request that took no turn (robots.txt) went out at ``at``: the next start
        waits the delay from then."""
        self.last_start = max(self.last_start, at)
        due = at + (delay := self.delay())
        if delay > 0 and due > self.next_start:
            self.next_start = due
            if self.record is not None:
                self.record.append(Pace("start", self.host, at, due))

    async def wait_turn(self) -> Start | None:
        """Wait until the host's delay has passed since the previous request went out;
        the returned ``Start`` is called when this one goes out (``None``: no delay).

        The next start is counted from the moment a request really starts, not booked
        ahead: booked times let sleepers that a stalled loop wakes together start
        together. The lock, held until the request is sent, keeps two waiters of one
        host from going out on one deadline. The delay is read when it is due, not
        when the wait began: autothrottle may have changed it meanwhile.
        """
        if self.delay() <= 0:
            self.last_start = await self._due()
            self._turn(self.last_start)
            return None
        await self.starting.acquire()
        try:
            now = await self._due()
        except BaseException:
            self.starting.release()
            raise
        self._turn(now)
        self.next_start = now + self.delay()  # until the handler says it sent
        return Start(self)

    async def _due(self) -> float:
        """Sleep until the next start is due: the clock reading that found it due."""
        while (left := self.next_start - (now := time.monotonic())) > 0:  # noqa: ASYNC110 - a deadline, not an event
            await asyncio.sleep(left)
        return now

    def _turn(self, now: float) -> None:
        if self.record is not None:
            self.record.append(Pace("turn", self.host, now, self.next_start))


class Start:
    """One request's start on its host: called when it goes out (at the latest when its
    download ends), it counts the host's delay from then and lets the next one wait."""

    __slots__ = ("done", "slot")

    def __init__(self, slot: HostSlot) -> None:
        self.slot, self.done = slot, False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            slot, now = self.slot, time.monotonic()
            slot.last_start = now
            slot.next_start = max(slot.next_start, now + slot.delay())
            if slot.record is not None:
                slot.record.append(Pace("start", slot.host, now, slot.next_start))
            self.slot.starting.release()


class Hold:
    """A request handed to a worker on its host's slot, until its download ends."""

    __slots__ = ("slot", "started")

    def __init__(self, slot: HostSlot) -> None:
        self.slot, self.started = slot, False


class ReadyHosts:
    """The hosts' slots and queues, and the heap of hosts by due time (module docstring).

    ``blocked(url)``: the request may not start yet whatever its slot says (its
    robots.txt does not answer); ``denied(url)``: robots.txt is known to forbid it.
    """

    def __init__(
        self,
        throttle: Throttle,
        *,
        size: int,
        limit: int,
        blocked: Callable[[str], bool],
        denied: Callable[[str], bool],
    ) -> None:
        self.throttle = throttle
        self.limit = limit
        self.blocked, self.denied = blocked, denied
        self.turns = 0  # host turns taken (starts waited for), for tests and counters
        self._slots: LRU[str, HostSlot] = LRU(size, HostSlot.idle)
        self._parked: dict[str, HostSlot] = {}  # hosts with requests waiting
        self._count = 0  # requests waiting, over every host
        self._skips = 0  # requests sent back to the frontier since the last start
        self._budget = limit  # how many may be, before the next start
        self.sent_back = 0  # requests sent back to the frontier (no room), in all
        #: (due, order, host); a host has one live entry (``HostSlot.entry``), others are stale
        self._heap: list[tuple[float, int, str]] = []
        self._order = itertools.count()
        self._holds: dict[int, Hold] = {}  # id(request) -> its hold
        #: slot-seconds free while the host had requests waiting aside and no delay ran,
        #: and slot-seconds while it had requests waiting: their ratio is the idle share
        self.slot_idle = 0.0
        self.slot_waited = 0.0
        self._record: list[Pace] | None = None

    def record_paces(self) -> list[Pace]:
        """From now on, every host's pace decisions (``Pace``), in order, in the list
        returned (unbounded: for tests and short diagnostic crawls)."""
        record = self._record = self._record if self._record is not None else []
        for slot in filter(None, map(self._slots.peek, self._slots)):
            slot.record = record
        return record

    def idle_share(self) -> float | None:
        """Of the slot-time of hosts with requests waiting aside, the share that was free
        while no delay ran: politeness allowed a start, and none was made (None: no host
        had a request waiting)."""
        return self.slot_idle / self.slot_waited if self.slot_waited else None

    def _account(self, slot: HostSlot, now: float) -> None:
        """Count ``slot``'s time since it was last counted, before its state changes."""
        last, slot.mark = slot.mark, now
        if not slot.waiting or now <= last:
            return
        self.slot_waited += slot.capacity * (now - last)
        free = slot.capacity - slot.active
        undelayed = now - max(last, slot.next_start)
        if free > 0 and undelayed > 0:
            self.slot_idle += free * undelayed

    def parked_by_host(self) -> dict[str, int]:
        """How many requests wait aside for each host (for the progress display)."""
        return {host: len(slot.waiting) for host, slot in self._parked.items()}

    def __len__(self) -> int:
        """Hosts whose slot is kept (bounded by ``size``, idle ones forgotten first)."""
        return len(self._slots)

    def slot(self, host: str) -> HostSlot:
        """``host``'s slot, made on first use."""
        slot = self._slots.get(host)
        if slot is None:
            slot = self._slots.put(host, HostSlot(host, self.throttle))
            slot.record = self._record
        return slot

    def peek(self, host: str) -> HostSlot | None:
        """``host``'s slot if it has one (not made)."""
        return self._slots.peek(host)

    def paces(self, hosts: Iterable[str]) -> dict[str, tuple[float, float]]:
        """What a move of ``hosts`` to another owner hands on, for each host that must
        still rest: seconds since its last start, and the delay from that start to its
        next (a rest after a 429 or a 503 included), so the new owner starts no sooner."""
        now, paces = time.monotonic(), {}
        for slot in filter(None, map(self._slots.peek, hosts)):
            if slot.next_start > now:
                start = slot.last_start or now
                paces[slot.host] = (now - start, slot.next_start - start)
        return paces

    def seed(self, host: str, rest: float) -> None:
        """``host`` comes from another owner and must rest ``rest`` s more: no request
        of it starts here sooner."""
        slot = self.slot(host)
        slot.next_start = max(slot.next_start, time.monotonic() + rest)

    def taking(self) -> bool:
        """Whether a worker may take another request from the frontier: there is room
        aside, and the takes since the last start were not all sent back."""
        return self._count < self.limit and self._skips < self._budget

    def place(self, request: Request) -> Placement:
        """Hand ``request`` out if its host is due now (``go``, its slot held until
        ``release``), or if robots.txt forbids it (``go``, no slot: it costs no turn);
        else set it aside (``parked``), or, with no room, send it back (``back``)."""
        slot = self.slot(request.host_key)
        self._account(slot, time.monotonic())
        due = slot.due()
        now = due is not None and due <= time.monotonic() and not self.blocked(request.url)
        denied = not now and self.denied(request.url)
        full = self._count >= self.limit or len(slot.waiting) >= PER_HOST * slot.capacity
        if not (now or denied) and full:
            return self._back()
        if now or denied:  # going past the full hosts found one that starts: worth it
            self._budget = self.limit
        if now:
            self._hold(request, slot)
        if now or denied:
            return "go"
        slot.waiting.append(request)
        self._count += 1
        if slot.host not in self._parked:
            self._parked[slot.host] = slot
            self._push(slot, due)
        return "parked"

    def _back(self) -> Placement:
        """No room: the request goes back to the frontier. A run of those that found no
        other host halves how many the next run may send (at least one after each
        start), so a crawl of one busy host does not spin through its frontier."""
        self._skips += 1
        self.sent_back += 1
        if self._skips >= self._budget:
            self._budget = max(1, self._budget // 2)
        return "back"

    def ready(self) -> Request | None:
        """A request set aside whose host is due now (its slot held), first due first."""
        now = time.monotonic()
        while self._heap and self._heap[0][0] <= now:
            slot = self._live(heapq.heappop(self._heap))
            if slot is None:
                continue
            slot.entry = None
            due = slot.due()
            if due is None:  # pushed again when a slot frees or a request starts
                continue
            if due > now:
                self._push(slot, due)
                continue
            if self.blocked(slot.waiting[0].url):
                self._push(slot, now + UNREACHABLE_RECHECK)
                continue
            self._account(slot, now)
            request = slot.waiting.popleft()
            self._count -= 1
            if slot.waiting:
                self._push(slot, now)
            else:
                del self._parked[slot.host]
            self._hold(request, slot)
            return request
        return None

    def next_due(self) -> float | None:
        """Seconds until the first host with requests aside may be due (None: no host)."""
        heap = self._heap
        while heap and self._live(heap[0]) is None:
            heapq.heappop(heap)
        return max(heap[0][0] - time.monotonic(), 0.0) if heap else None

    def started(self, slot: HostSlot, hold: Hold | None) -> bool:
        """A request had its turn on ``slot``: the host is due again at its next start.
        Say whether it became due at a known time for requests waiting aside."""
        self.turns += 1
        self._account(slot, time.monotonic())
        if hold is not None and hold.slot is slot and not hold.started:
            hold.started = True
            slot.pending -= 1
            if slot.waiting:
                self._push(slot, slot.next_start)
                return True
        return False

    def hold_of(self, request: Request) -> Hold | None:
        """The hold ``place`` or ``ready`` gave ``request``, if any."""
        return self._holds.get(id(request))

    def release(self, request: Request) -> bool:
        """``request``'s download is over: its slot is free (and a turn it never took
        is no longer waited for). Say whether requests of its host wait aside."""
        hold = self._holds.pop(id(request), None)
        if hold is None:
            return False
        slot = hold.slot
        self._account(slot, time.monotonic())
        slot.active -= 1
        if not hold.started:
            slot.pending -= 1
        if slot.waiting:
            self._push(slot, slot.next_start)
        return bool(slot.waiting)

    def drain(self) -> list[Request]:
        """Every request set aside (to hand back to the frontier on close)."""
        requests = [r for slot in self._parked.values() for r in slot.waiting]
        for slot in self._parked.values():
            slot.waiting.clear()
            slot.entry = None
        self._parked.clear()
        self._heap.clear()
        self._count = 0
        return requests

    def _hold(self, request: Request, slot: HostSlot) -> None:
        hold = self._holds[id(request)] = Hold(slot)
        slot.active += 1
        if slot.delay() > 0:
            slot.pending += 1
        else:
            hold.started = True
        self._skips = 0

    def _push(self, slot: HostSlot, due: float | None) -> None:
        """Look at ``slot`` again at ``due``. One live entry a host, the earliest asked
        for: a later time is found when that entry pops (``ready`` pushes it again). An
        entry at every start and end made the heap grow by two a page at a delay, and
        every start popped and pushed all of one host's (80,000 pops for 200 pages)."""
        if due is None or not math.isfinite(due):
            return
        if slot.entry is not None and slot.entry[0] <= due:
            return
        slot.entry = (due, next(self._order))
        heapq.heappush(self._heap, (*slot.entry, slot.host))

    def _live(self, entry: tuple[float, int, str]) -> HostSlot | None:
        """The parked slot ``entry`` is the live entry of, else None (stale)."""
        slot = self._parked.get(entry[2])
        return slot if slot is not None and slot.entry == entry[:2] else None
