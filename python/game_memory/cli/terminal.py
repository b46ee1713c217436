"""What the CLI prints: user data verbatim, one error line, one notice line.

Memory text, ids, sessions and paths are game data, and Godot games write BBCode
(``[b]``, ``[/color]``) into them. Rich would read such text as its own markup: a
closing tag it never opened is a ``MarkupError`` (a crash on a valid save), and a tag it
knows is dropped from the output. So data reaches a console only as :class:`~rich.text.Text`
(or escaped), and the consoles made here do not turn ``:name:`` into emoji either: what a
game stored is what the terminal shows.

Output that cannot show a character is not a crash either: stdout redirected to a file or
a pipe on Windows is encoded in the ANSI code page (cp1252, cp936...), which has no ``✓``
and no ``衛兵``. :func:`prepare_output` makes such a stream write what it cannot encode as
a backslash escape (``\\u885b``) instead of raising ``UnicodeEncodeError``.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from game_memory.cli.encoding import prepare_output, unicode_output

__all__ = [
    "POSTGRES_HINT",
    "console",
    "fail",
    "os_error",
    "prepare_output",
    "say",
    "unicode_output",
    "verbatim",
]

#: What ``--database`` needs when the PostgreSQL backend is not installed.
POSTGRES_HINT = "--database needs the PostgreSQL backend: pip install 'game-memory[postgres]'"


def console(*, stderr: bool = False) -> Console:
    """A console that prints data as given: no highlighting, no emoji codes; a character
    the output cannot encode is escaped (:func:`prepare_output`), never a crash."""
    prepare_output()
    return Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=stderr)


def verbatim(value: object) -> Text:
    """``value`` as text Rich shows exactly (no markup, no emoji), e.g. for a table cell."""
    return Text(str(value))


def fail(message: str) -> int:
    """Print ``error: message`` on stderr (the message verbatim); return exit code 1."""
    console(stderr=True).print(f"[red]error:[/red] {escape(message)}")
    return 1


def say(kind: str, message: str) -> None:
    """Print ``kind: message`` (a notice, hint or warning) on stderr, the message verbatim."""
    colour = "yellow" if kind in ("notice", "hint") else "cyan"
    console(stderr=True).print(f"[{colour}]{kind}:[/{colour}] {escape(message)}")


def os_error(exc: OSError) -> str:
    """An ``OSError`` as ``reason (path)``, the way every command names a failed path."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
