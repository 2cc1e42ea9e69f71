"""Extract Google's robots.txt allow/disallow cases into tests/data/google_robotstxt_cases.json.

Reads ``robots_test.cc`` of github.com/google/robotstxt (Apache-2.0) and runs the few
C++ forms its ``RobotsUnittest`` tests build their cases with (string literals and
their concatenation, ``std::string``/``absl::string_view`` variables in block scopes,
``absl::StrCat``/``absl::StrAppend``, the integer arithmetic and ``while`` loop of
``GoogleOnly_LineTooLong``), recording each
``EXPECT_TRUE/EXPECT_FALSE(IsUserAgentAllowed(robotstxt, useragent, url))``::

    git -C /work/.mirror/google+robotstxt/repo show 22b355f:robots_test.cc >/tmp/robots_test.cc
    python3 bench/google_robots_cases.py /tmp/robots_test.cc \
        >tests/data/google_robotstxt_cases.json

Tests with no such expectation (they check the C++ parser's callbacks or internal
functions) are listed in ``SKIPPED`` with the reason; any other statement stops the
script, so nothing is dropped silently.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

COMMIT = "22b355f"
#: tests of robots_test.cc that hold no IsUserAgentAllowed expectation, and why
SKIPPED = {
    "ID_VerifyValidUserAgentsToObey": "checks RobotsMatcher::IsValidUserAgentToObey, "
    "a C++ helper, not an allow/disallow answer",
    "ID_LinesNumbersAreCountedCorrectly": "checks the parser callbacks' line numbers "
    "and directive counts (RobotsStatsReporter)",
    "ID_UTF8ByteOrderMarkIsSkipped": "checks the parser callbacks' directive counts "
    "(RobotsStatsReporter), with partial or broken BOM bytes",
    "ID_NonStandardLineExample_Sitemap": "checks the Sitemap value the parser callback "
    "receives (RobotsStatsReporter)",
    "TestGetPathParamsQuery": "checks GetPathParamsQuery, an internal C++ function",
    "TestMaybeEscapePattern": "checks MaybeEscapePattern, an internal C++ function",
}
#: expectations of kept tests on C++ helpers, not on IsUserAgentAllowed
IGNORED_CALLS = ("RobotsMatcher::IsValidUserAgentToObey",)

_TOKEN = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|(?P<str>"(?:\\.|[^"\\])*")|(?P<num>\d+)'
    r"|(?P<name>[A-Za-z_][\w:]*)|(?P<punct>&&|<=|>=|==|[-+*<>=(){};,.&!])|(?P<other>[^\s])",
    re.DOTALL,
)
_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\", '"': b'"', "'": b"'"}


def _literal(token: str) -> bytes:
    body, out, i = token[1:-1].encode(), bytearray(), 0
    while i < len(body):
        if body[i : i + 1] == b"\\":
            code = chr(body[i + 1])
            if code == "x":
                digits = re.match(rb"[0-9A-Fa-f]+", body[i + 2 :])
                assert digits
                out.append(int(digits.group(), 16))
                i += 2 + len(digits.group())
                continue
            out += _ESCAPES[code]
            i += 2
        else:
            out.append(body[i])
            i += 1
    return bytes(out)


def tokens(source: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None:
            raise SyntaxError(f"cannot read {source[pos : pos + 40]!r}")
        pos = match.end()
        if match.lastgroup:
            out.append((match.lastgroup, match.group()))
    return out


class Test:
    """Runs one TEST body, collecting its IsUserAgentAllowed expectations."""

    def __init__(self, name: str, toks: list[tuple[str, str]], source_lines: list[int]) -> None:
        self.name, self.toks, self.lines = name, toks, source_lines
        self.pos = 0
        self.scopes: list[dict[str, Any]] = [{}]
        self.cases: list[dict[str, Any]] = []

    def peek(self, ahead: int = 0) -> str:
        return self.toks[self.pos + ahead][1]

    def take(self, expected: str | None = None) -> str:
        value = self.toks[self.pos][1]
        if expected is not None and value != expected:
            raise SyntaxError(f"{self.name}: {expected!r} expected, got {value!r}")
        self.pos += 1
        return value

    def lookup(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise NameError(f"{self.name}: {name}")

    def assign(self, name: str, value: Any) -> None:
        for scope in reversed(self.scopes):
            if name in scope:
                scope[name] = value
                return
        raise NameError(f"{self.name}: {name}")

    def atom(self) -> Any:
        kind, value = self.toks[self.pos]
        if kind == "str":
            out = b""
            while self.toks[self.pos][0] == "str":  # adjacent literals concatenate
                out += _literal(self.take())
            if self.peek() == ".":  # std::string("\n").length()
                raise SyntaxError(self.name)
            return out
        if kind == "num":
            return int(self.take())
        self.take()
        if value == "absl::StrCat":
            return b"".join(self.args())
        if value == "std::string" and self.peek() == "(":
            self.take("(")
            inner = self.expr()
            self.take(")")
            value_ = inner
        else:
            value_ = self.lookup(value)
        if self.peek() == ".":  # .length() / .size()
            self.take(".")
            method = self.take()
            assert method in ("length", "size"), method
            self.take("(")
            self.take(")")
            return len(value_)
        return value_

    def expr(self) -> Any:
        value = self.atom()
        while self.peek() in ("+", "-", "*"):
            op = self.take()
            right = self.atom()
            value = value + right if op == "+" else value - right if op == "-" else value * right
        return value

    def args(self) -> list[Any]:
        self.take("(")
        out = []
        while self.peek() != ")":
            if self.peek() == "&":
                self.take()
            out.append(self.expr())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return out

    def block(self) -> None:
        self.take("{")
        self.scopes.append({})
        while self.peek() != "}":
            self.statement()
        self.take("}")
        self.scopes.pop()

    def statement(self) -> None:
        head = self.peek()
        if head == "{":
            self.block()
        elif head in ("EXPECT_TRUE", "EXPECT_FALSE"):
            self.expectation()
        elif head == "absl::StrAppend":
            self.str_append()
        elif head == "while":
            self.while_loop()
        else:
            self.declaration()

    def expectation(self) -> None:
        line = self.lines[self.pos]
        expected = self.take() == "EXPECT_TRUE"
        self.take("(")
        call = self.take()
        if call in IGNORED_CALLS:
            self.args()
        elif call == "IsUserAgentAllowed":
            robotstxt, agent, url = self.args()
            self.cases.append(
                {
                    "test": self.name,
                    "line": line,
                    "robotstxt": robotstxt.decode("utf-8"),
                    "useragent": agent.decode("utf-8"),
                    "url": url.decode("utf-8"),
                    "allowed": expected,
                }
            )
        else:
            raise SyntaxError(f"{self.name}: unknown expectation {call}")
        self.take(")")
        self.take(";")

    def str_append(self) -> None:
        self.take("absl::StrAppend")
        self.take("(")
        self.take("&")
        target = self.take()
        parts = []
        while self.peek() == ",":
            self.take()
            parts.append(self.expr())
        self.take(")")
        self.take(";")
        self.assign(target, self.lookup(target) + b"".join(parts))

    def while_loop(self) -> None:
        self.take("while")
        self.take("(")
        start = self.pos
        while True:
            self.pos = start
            left = self.expr()
            self.take("<")
            right = self.expr()
            self.take(")")
            if not left < right:
                break
            self.block()
        depth = 0  # skip the body once the condition fails
        while True:
            token = self.take()
            depth += token == "{"
            depth -= token == "}"
            if depth == 0:
                break

    def declaration(self) -> None:
        """``[const] type name [= expr];``"""
        if self.peek() == "const":
            self.take()
        kind = self.take()
        if kind not in ("absl::string_view", "std::string", "size_t", "int"):
            raise SyntaxError(f"{self.name}: unknown statement at {kind!r}")
        name = self.take()
        value: Any = b"" if kind in ("absl::string_view", "std::string") else 0
        if self.peek() == "=":
            self.take()
            value = self.expr()
        self.take(";")
        self.scopes[-1][name] = value


def extract(source: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    cases: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for match in re.finditer(r"^TEST\(RobotsUnittest, (\w+)\) ", source, re.MULTILINE):
        name = match.group(1)
        body_start = match.end()
        toks_with_pos = []
        depth = 0
        pos = body_start
        while True:  # the body: up to its matching brace
            token = _TOKEN.match(source, pos)
            assert token is not None
            if token.lastgroup:
                toks_with_pos.append((token.lastgroup, token.group(), pos))
                depth += token.group() == "{"
                depth -= token.group() == "}"
            pos = token.end()
            if depth == 0 and toks_with_pos:
                break
        if name in SKIPPED:
            skipped[name] = SKIPPED[name]
            continue
        toks = [(kind, value) for kind, value, _ in toks_with_pos]
        lines = [source.count("\n", 0, at) + 1 for _, _, at in toks_with_pos]
        test = Test(name, toks, lines)
        test.block()
        if not test.cases:
            raise SyntaxError(f"{name}: no IsUserAgentAllowed case and not in SKIPPED")
        cases.extend(test.cases)
    return cases, skipped


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    cases, skipped = extract(source)
    counts: dict[str, int] = {}
    for case in cases:
        counts[case["test"]] = counts.get(case["test"], 0) + 1
        case["id"] = f"{case['test']}#{counts[case['test']]}"
    document = {
        "source": f"https://github.com/google/robotstxt/blob/{COMMIT}/robots_test.cc",
        "license": "Apache-2.0",
        "skipped": skipped,
        "cases": [{"id": c.pop("id"), **c} for c in cases],
    }
    json.dump(document, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
