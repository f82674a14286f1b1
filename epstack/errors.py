"""One error hierarchy; each kind of failure maps to one exit code, handled only in cli.main."""

from __future__ import annotations


class EpstackError(Exception):
    """Base class: the message is one line meant for the user."""

    exit_code = 1


class BadInput(EpstackError):
    """The user's input (pins file, arguments) is wrong; nothing was written."""

    exit_code = 2


class EnvironmentProblem(EpstackError):
    """A tool the command needs (Docker engine, hadolint) is missing or not running."""

    exit_code = 3


class CommandFailed(EpstackError):
    """An external command ran and failed."""

    exit_code = 1


class Interrupted(EpstackError):
    """The user interrupted a command (Ctrl-C); what it started was stopped."""

    exit_code = 130
