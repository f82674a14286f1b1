"""One error hierarchy and one exit-code table for every command (the smoke included); errors become
exit codes only in epstack.commands.common.execute, which every entry point runs through. A user's
value in a message goes through `shown`."""

from __future__ import annotations

import unicodedata

# The exit codes of every epstack command; docs/reference/exit-codes.md is written from this table.
OK = 0
CHECK_FAILED = 1
BAD_INPUT = 2
ENVIRONMENT = 3
INTERRUPTED = 130
EXIT_CODES: dict[int, str] = {
    OK: "ok",
    CHECK_FAILED: "a check failed: drift in the guard, a wrong token or a hang in the smoke, a predicted "
    "move, a failed command",
    BAD_INPUT: "bad input (pins file, flags, paths, environment variables; see below); nothing was done",
    ENVIRONMENT: "the environment lacks something: Docker, CUDA, torch, a GPU, the network, disk space",
    INTERRUPTED: "interrupted (Ctrl-C, SIGTERM): what was started was stopped, nothing left half-written",
}


# How much of a user's value a message shows: a 100 KB value never makes a 100 KB message.
SHOWN_WHOLE = 160  # a value up to this long is shown whole (an image reference with registry and digest)
SHOWN_HEAD = 60  # of a longer one, its first characters


# Characters that end or hide in a line of text, or that a terminal acts on: controls (newline, carriage
# return, ESC, NEL), invisible format characters (bidi overrides, zero widths), line and paragraph
# separators, and the surrogates that stand for bytes that are not UTF-8.
NOT_TEXT = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Cs": "a byte that is not UTF-8",
}


def printable(text: str) -> str:
    """`text` with each character of NOT_TEXT written as its escape (ESC as \\x1b, U+202E as \\u202e):
    what a server or a file says is printed literally, never acted on by the terminal."""
    return "".join(repr(char)[1:-1] if unicodedata.category(char) in NOT_TEXT else char for char in text)


def shown(value: str, *, quote: bool = True) -> str:
    """`value` as a message shows it, repr()'d (`quote`) or as it is with its controls escaped
    (`printable`): whole up to SHOWN_WHOLE characters, else its first SHOWN_HEAD, "..." and its length:
    'xxx'... (100000 chars)."""
    if len(value) <= SHOWN_WHOLE:
        return repr(value) if quote else printable(value)
    head = value[:SHOWN_HEAD]
    return f"{repr(head) if quote else printable(head)}... ({len(value)} chars)"


class EpstackError(Exception):
    """Base class: the message is meant for the user, one line per problem."""

    exit_code = CHECK_FAILED


class BadInput(EpstackError):
    """The user's input (pins file, arguments, paths, environment) is wrong; nothing was written."""

    exit_code = BAD_INPUT


class EnvironmentProblem(EpstackError):
    """Something the command needs (Docker engine, hadolint, CUDA, a GPU) is missing or not running."""

    exit_code = ENVIRONMENT


class CommandFailed(EpstackError):
    """An external command ran and failed."""

    exit_code = CHECK_FAILED
