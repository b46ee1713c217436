"""``--database`` URLs: refused unless PostgreSQL's, and shown without their password.

A mistyped scheme (``postgres_typo://``, ``mysql://``) used to reach ``open_memory`` as a
folder path: ``serve`` and ``migrate`` then created a local file save named after the URL,
password included. And the commands a hint or an error suggests must not print the
password they were given.
"""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit, urlunsplit

__all__ = ["database_url", "shown_url"]


def database_url(value: str) -> str:
    """The ``--database`` argument, refused (a usage error naming no password) unless it is
    a URL ``open_memory`` takes for PostgreSQL (``opening.is_database``)."""
    from game_memory.opening import is_database  # when parsed, not for --help

    if not is_database(value):
        scheme, separator, _rest = value.partition("://")
        shown = f"a URL of scheme {scheme[:40]!r}" if separator else "a value without a scheme"
        raise argparse.ArgumentTypeError(
            f"must be a postgresql:// (or postgres://) URL, not {shown}; a save folder is "
            "given with --save-dir"
        )
    return value


def shown_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for messages and hints."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:  # not a URL we can take apart: show none of it
        return "postgresql://…"
