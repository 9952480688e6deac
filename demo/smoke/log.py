"""Reading Home Assistant's log: what makes a smoke run fail, what it reports."""

from dataclasses import dataclass
import re
from typing import Final

# "2026-10-28 08:39:00.123 ERROR (MainThread) [name] message"; from 2026.11
# the time has its UTC offset ("08:39:00.123+00:00").
ENTRY: Final = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? "
    r"(?P<level>[A-Z]+) "
    r"\((?P<thread>[^)]*)\) \[(?P<logger>[^\]]+)\] "
)
# A record in a layout ENTRY does not know still starts with the date and
# names its level: it is read as one, so no error hides in the record before.
LOOSE_ENTRY: Final = re.compile(
    r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S* .*?"
    r"\b(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"
)
FAILING_LEVELS: Final = frozenset({"ERROR", "CRITICAL"})
TRACEBACK: Final = "Traceback (most recent call last)"


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log record: its first line and the lines that follow it."""

    level: str
    logger: str
    text: str

    @property
    def first_line(self) -> str:
        """Return the record's first line."""
        return self.text.split("\n", 1)[0]


def entries(text: str) -> list[LogEntry]:
    """Split a log into records (lines before the first record are one)."""
    found: list[LogEntry] = []
    level, logger, lines = "", "", []
    for line in text.splitlines():
        if match := ENTRY.match(line) or LOOSE_ENTRY.match(line):
            if lines:
                found.append(LogEntry(level, logger, "\n".join(lines)))
            level, lines = match["level"], [line]
            logger = match.groupdict().get("logger") or ""
        else:
            lines.append(line)
    if lines:
        found.append(LogEntry(level, logger, "\n".join(lines)))
    return found


def failures(text: str) -> list[LogEntry]:
    """Return the records that fail a run: errors, and anything with a traceback."""
    return [
        entry
        for entry in entries(text)
        if entry.level in FAILING_LEVELS or TRACEBACK in entry.text
    ]


# Home Assistant says this of every custom integration it loads.
UNTESTED: Final = "which has not been tested by Home Assistant"


def integration_warnings(text: str, domain: str) -> list[LogEntry]:
    """Return the warnings that name the integration (deprecations, ...).

    Its own logger's, and Home Assistant's that name it (``xiaozhi``, not
    ``xiaozhi_demo_voice``), except the one every custom integration gets.
    """
    name = re.compile(rf"\b{re.escape(domain)}\b(?!_)")
    return [
        entry
        for entry in entries(text)
        if entry.level == "WARNING"
        and name.search(entry.text)
        and UNTESTED not in entry.text
    ]
