"""Every error netdisco raises, rooted at one base class.

The tree is complete (``tests/netdisco/test_exceptions_tree.py`` compares it with
the classes below); a class with a second, built-in base shows it in its line.

NetdiscoError
├── ConfigError              a bad setting or config file (names the key)
│   └── SettingNotAllowed    over HTTP: a setting a token holder may not set
├── SpiderLoadError          FILE.py:Class or module:Class cannot be loaded
│   └── SpiderNotAllowed     over HTTP: the module is not in ``spider_modules``
├── SpiderStartFailed        the spider's ``start()`` or ``start_requests()`` raised: failed
├── RequestError             a request that cannot be made (carries ``url``)
│   ├── InvalidURL           malformed or non-http(s) URL
│   ├── OutOfScope           the URL (or a redirect hop) is outside the spider's scope
│   ├── RobotsDenied         robots.txt disallows the URL
│   ├── TooManyRedirects     redirect cap reached or a redirect loop
│   ├── ResponseTooLarge     the body passed ``max_response_size``
│   ├── TransferFailed       one attempt failed on the network (``retryable``: try again)
│   │   └── TransferTimeout  ... because it took longer than ``timeout``
│   ├── DownloadFailed       network error, retries exhausted
│   ├── HostGivenUp          the host failed ``host_error_limit`` times in a row: given up
│   ├── HttpStatusError      the final response had a 4xx or 5xx status
│   ├── DuplicateRedirect    a redirect to a page already fetched or queued
│   ├── UnexpectedNotModified  a 304 for a page the page store does not hold
│   ├── MiddlewareError      a downloader middleware raised
│   │   └── MiddlewareTypeError   ... or returned the wrong type (also a TypeError)
│   └── RenderError          the browser could not render the page
│       ├── RenderTimeout    the page did not settle within ``render_timeout``
│       └── BrowserCrashed   Chromium died under the page (retried)
├── BrowserUnavailable       ``render`` needs Playwright or Chromium, which is missing
├── BrowserUnresponsive      a call to Chromium outlived its bound; the pool dropped it
├── FeedError                a feed cannot be opened or written (names the path)
├── SitemapInvalid           a sitemap that is not well-formed, truncated or too large
├── DropItem                 raised by a pipeline step to drop one item
├── InvalidItem              an item that does not fit its schema (``invalid_items = "fail"``)
├── NotAnItem                a callback yielded neither a request nor an item (also a TypeError)
├── InvalidTransition        a lifecycle control not allowed in the current state
├── UnknownSpider            no spider of that name in the engine
├── DuplicateSpider          a spider of that name already runs in the engine
├── RegistrationError        ZooKeeper registration cannot proceed
│   └── TombstoneRefused     a leave without its tombstone: the tombstone root is not ours
├── LeaseFenced              a leased request reached its start after the fence closed
├── FrontierUnavailable      the shared frontier (Redis) cannot be reached
├── FrontierFailed           the frontier cannot go on; the spider ends ``failed``
│   ├── CrawlLost            Redis lost a shared crawl (restart without persistence, FLUSHALL)
│   └── StateDirError        a ``state_dir`` that cannot be used (names the path)
├── RequestNotShareable      a request cannot be stored in a shared frontier (carries ``url``)
├── HookError                a monitor hook could not deliver an event (names the hook)
├── ApiError                 an HTTP error answer: status, machine code, sentence
│   ├── ControlRefused       a control call through the monitor, refused or unreachable
│   └── ProjectRefused       a project archive, name or deploy call the monitor refuses
├── ProjectUnavailable       a project version that cannot be read from ZooKeeper or installed
├── AnswerTooLarge           an engine's answer to the monitor passed its size cap
├── WrongEngine              an engine's address answered as another engine (its id header)
└── DemoFailed               ``netdisco demo``: a step it shows did not happen in time
"""

from __future__ import annotations

from collections.abc import Sequence


class NetdiscoError(Exception):
    """Base of every netdisco error."""


class ConfigError(NetdiscoError):
    """A setting or configuration file is invalid; ``key`` names the culprit."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.problems: tuple[ConfigError, ...] = (self,)

    @classmethod
    def together(cls, errors: Sequence[ConfigError]) -> ConfigError:
        """One error that says every one of ``errors``, a line each, so that one run
        shows every typo of a file (``key`` is the first one's)."""
        problems = tuple(problem for error in errors for problem in error.problems)
        if len(problems) == 1:
            return problems[0]
        error = cls(problems[0].key, "")
        error.args = (f"{len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems),)
        error.problems = problems
        return error


class SettingNotAllowed(ConfigError):
    """A setting a ``POST /netdiscovery/spiders`` body may not set (docs/security.md)."""


class SpiderLoadError(NetdiscoError):
    """A spider reference (``FILE.py:Class`` or ``module:Class``) cannot be loaded."""


class SpiderStartFailed(NetdiscoError):
    """The spider's ``start()`` or ``start_requests()`` raised: the crawl ends ``failed``
    (a crawl that lost its seeds has not finished, whatever it fetched)."""


class SpiderNotAllowed(SpiderLoadError):
    """A spider asked for over HTTP whose module the engine's allow-list does not name."""


class RequestError(NetdiscoError):
    """A request that could not be turned into a response."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class InvalidURL(RequestError):
    """The URL is malformed or its scheme is not http or https."""


class OutOfScope(RequestError):
    """The URL, or a redirect hop, falls outside the spider's scope."""


class RobotsDenied(RequestError):
    """robots.txt disallows the URL for our user agent."""


class TooManyRedirects(RequestError):
    """The redirect cap was reached or a redirect loop was detected."""


class ResponseTooLarge(RequestError):
    """The body grew past ``max_response_size``; reading stopped there."""


class TransferFailed(RequestError):
    """One attempt failed on the way: no connection, no such host, a timeout, a body cut
    short or an answer that is not HTTP. Download handlers raise it in place of their
    library's errors; ``retryable`` says whether another attempt may mend it."""

    def __init__(self, message: str, *, url: str, retryable: bool) -> None:
        super().__init__(message, url=url)
        self.retryable = retryable


class TransferTimeout(TransferFailed):
    """One attempt took longer than the ``timeout`` (or ``connect_timeout``) allows."""


class DownloadFailed(RequestError):
    """A network error or retryable status persisted through every retry."""


class HostGivenUp(RequestError):
    """The host failed ``host_error_limit`` times in a row (robots.txt timeouts or 5xx,
    failed requests): it is given up for the crawl, so a dead host cannot hold it open."""


class DropItem(NetdiscoError):
    """Raised by an item pipeline step: the item goes no further."""


class InvalidItem(NetdiscoError):
    """An item that does not fit its schema, with ``invalid_items = "fail"``: the spider
    ends failed (netdisco.crawl.schemas)."""


class NotAnItem(NetdiscoError, TypeError):
    """A callback yielded a value that is neither a ``Request`` nor an item any adapter
    knows (a string, a number, an object of a plain class): counted, logged, not written."""


class InvalidTransition(NetdiscoError):
    """A lifecycle control that the spider's current state does not allow."""

    def __init__(self, spider: str, state: str, action: str) -> None:
        super().__init__(f"spider {spider!r} cannot {action} while {state}")
        self.spider = spider
        self.state = state
        self.action = action


class UnknownSpider(NetdiscoError):
    """No spider of that name runs in this engine."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no spider named {name!r}")
        self.name = name


class RegistrationError(NetdiscoError):
    """ZooKeeper registration cannot proceed (bad root, ACL refused, ...)."""


class TombstoneRefused(RegistrationError):
    """The tombstone root refused our tombstone (someone re-created it, shut to us): the
    node was deleted without it, and the monitor reads the leave as a crash."""

    def __init__(self, root: str) -> None:
        super().__init__(
            f"{root} refused our tombstone: it was re-created by another client; the node "
            "was deleted without one (the monitor reports engine_lost)"
        )
        self.root = root


class LeaseFenced(NetdiscoError):
    """A leased request came to its start after the lease fence closed (its lease may be
    another engine's now): it goes back to the frontier unstarted. Not a request error:
    no middleware recovers it and it fails nothing."""


class FrontierUnavailable(NetdiscoError):
    """The shared frontier (Redis) cannot be reached."""


class FrontierFailed(NetdiscoError):
    """The frontier cannot go on: the crawl must end ``failed``, never ``finished``."""


class CrawlLost(FrontierFailed):
    """Redis no longer holds the shared crawl this engine joined (its epoch key is gone)."""


class StateDirError(FrontierFailed):
    """A ``state_dir`` that cannot hold a crawl: a file, unwritable, full, foreign or in use."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(f"state_dir {str(path)!r}: {message}")
        self.path = path


class HttpStatusError(RequestError):
    """The final response had an error status (4xx or 5xx after retries)."""

    def __init__(self, message: str, *, url: str, status: int) -> None:
        super().__init__(message, url=url)
        self.status = status


class UnexpectedNotModified(RequestError):
    """HTTP 304 for a request the crawl did not make conditional: no stored page to reuse."""


class DuplicateSpider(NetdiscoError):
    """A spider of that name already runs in this engine (names address spiders)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"a spider named {name!r} already runs in this engine")
        self.name = name


class RequestNotShareable(NetdiscoError):
    """A request cannot go into a shared frontier: its callback is not a method of the
    spider (only method names travel between engines) or its meta is not JSON-able."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url


class HookError(NetdiscoError):
    """A monitor hook (e-mail, webhook, command, callable) could not deliver an event."""

    def __init__(self, hook: str, message: str) -> None:
        super().__init__(f"{hook} hook: {message}")
        self.hook = hook


class WrongEngine(NetdiscoError):
    """An engine's advertised address answered as another engine (or as none): what it
    says is not shown, and it is sent no control request (``ENGINE_HEADER``)."""


class AnswerTooLarge(NetdiscoError):
    """An engine's HTTP answer to the monitor passed its cap: it was not read further."""


class DemoFailed(NetdiscoError):
    """``netdisco demo`` waited in vain for something it means to show (a join, an e-mail)."""


class DuplicateRedirect(RequestError):
    """A redirect led to a page already fetched or queued: dropped, counted as filtered."""


class MiddlewareError(RequestError):
    """A downloader middleware raised: the request fails, the crawl goes on."""

    def __init__(self, message: str, *, url: str, middleware: str) -> None:
        super().__init__(message, url=url)
        self.middleware = middleware


class MiddlewareTypeError(MiddlewareError, TypeError):
    """A downloader middleware returned something its hook may not return."""


class RenderError(RequestError):
    """Headless Chromium could not render the page."""


class RenderTimeout(RenderError):
    """The page's wait condition (load, network idle, a selector) was not met in time."""


class BrowserCrashed(RenderError):
    """Chromium died while rendering; the pool restarts it and the request is retried."""


class BrowserUnresponsive(NetdiscoError):
    """A call to Chromium outlived its bound; the pool has dropped that browser."""


class BrowserUnavailable(NetdiscoError):
    """Rendering was asked for, but Playwright or Chromium is missing (names which)."""


class FeedError(NetdiscoError):
    """A feed cannot be opened or written; the message names the path."""


class SitemapInvalid(NetdiscoError):
    """A sitemap could not be read to its end (bad XML, truncated gzip, past the size
    limit); the entries before the fault were read."""


class ApiError(NetdiscoError):
    """An HTTP error answer: status, a stable machine code and a sentence for humans."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ControlRefused(ApiError):
    """A control call through the monitor that was refused or could not reach its engine."""


class ProjectRefused(ApiError):
    """A deploy refused: a bad archive or name, over a cap, no spiders, or no deploy right.

    Raised before anything is written, so a refused deploy leaves nothing in ZooKeeper.
    """


class ProjectUnavailable(NetdiscoError):
    """A project version an engine cannot use: unknown, damaged in ZooKeeper, or its
    virtual environment could not be built (the message says which step failed)."""
