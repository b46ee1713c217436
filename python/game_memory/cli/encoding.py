"""What a command's output does with characters its stream cannot encode.

stdout redirected to a file or a pipe on Windows is encoded in the ANSI code page (cp1252,
cp936...), which has no ``✓`` and no ``衛兵``: :func:`prepare_output` makes such a stream
write what it cannot encode as a backslash escape (``\\u885b``) instead of raising
``UnicodeEncodeError`` (an exit 70, "a bug"). Apart from ``terminal.py`` because the
console-script entry point (``game_memory.cli.main``) calls it first, and the frozen
sidecar a game ships imports that package without rich.
"""

from __future__ import annotations

import codecs
import io
import sys

__all__ = ["prepare_output", "unicode_output"]


def unicode_output(stream: object | None = None) -> bool:
    """Whether ``stream`` (default ``sys.stdout``) encodes every character: a UTF encoding.

    What a writer of JSON asks before ``ensure_ascii=False``: elsewhere it escapes
    non-ASCII characters itself (``\\u885b``, valid JSON), since the stream's own
    replacement would not be."""
    shown = sys.stdout if stream is None else stream
    encoding = getattr(shown, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


def prepare_output() -> None:
    """Make stdout and stderr write what their encoding cannot as backslash escapes.

    Called once when the CLI starts (and by :func:`console`; it is idempotent). Only a
    text stream of a non-UTF encoding whose errors are ``strict`` is changed: a UTF
    stream can encode everything, and a stream a caller set up otherwise (a test's
    capture, ``PYTHONIOENCODING=...:replace``) is left as it is."""
    for stream in (sys.stdout, sys.stderr):
        if (
            isinstance(stream, io.TextIOWrapper)
            and stream.errors == "strict"
            and not unicode_output(stream)
        ):
            stream.reconfigure(errors="backslashreplace")
