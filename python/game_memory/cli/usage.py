"""Bad arguments found after parsing: exit code 2 and the usage line, as argparse's own.

``game-memory --help`` promises exit code 2 for bad arguments, with the usage line saying
which, and 1 for a save, index, model or path that cannot be used. argparse keeps that
promise for what it checks itself (a type, a choice, a missing option); the checks that
need more than one option, or the models of the Python API, run in the commands. They
raise :class:`UsageError` before anything is opened, and :func:`exit_with_usage` ends the
run the way ``parser.error`` does: the subcommand's usage and one ``error:`` line on
stderr, exit code 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:  # imported by the parser: ``game-memory --help`` stays fast
    from pydantic import ValidationError

__all__ = ["UsageError", "command_parser", "exit_with_usage", "usage_error"]


class UsageError(ValueError):
    """A command-line argument is wrong (its message names it); nothing was opened.

    A ``ValueError``, so code that turns option values into options (``recall_settings``)
    keeps its documented ``ValueError``.
    """


def command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The (sub)parser of the command ``args`` were parsed for (``parser`` if none)."""
    current = parser
    for attribute in ("command", "models_command"):
        name = getattr(args, attribute, None)
        commands = next(
            (
                action
                for action in current._actions
                if isinstance(action, argparse._SubParsersAction)
            ),
            None,
        )
        if name is None or commands is None or name not in commands.choices:
            break
        current = commands.choices[name]
    return current


def exit_with_usage(
    parser: argparse.ArgumentParser, args: argparse.Namespace, error: UsageError
) -> NoReturn:
    """Print the command's usage and ``error`` on stderr; exit with code 2 (``SystemExit``)."""
    command_parser(parser, args).error(str(error))


def usage_error(error: ValidationError, options: Mapping[str, str]) -> UsageError:
    """``error`` (from a model built of argument values) as a usage error naming the option.

    Args:
        error: What the model refused.
        options: The option of each model field given on the command line
            (``{"limit": "--limit"}``); a field not listed is named as the model names it.
    """
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "value"
        reason = item["msg"].removeprefix("Value error, ")
        problems.append(f"argument {options.get(field, field)}: {reason}")
    return UsageError("; ".join(problems))
