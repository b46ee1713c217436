"""``--maximum-entries N``: a save's store-wide bound, from the command line to the store.

The file store holds at most 100,000 memories unless it is opened with a larger
``maximum_entries``, and a save grown past that must be opened with its bound from then on
(a smaller one refuses appends, reads of a session larger than it, and a ledger of more
than twice it). So every command that opens a save takes the option (``_add_store_arguments``
of the parser) and hands it to the store it opens: through ``open_memory`` for ``serve`` and
the maintenance commands, directly for those that open a store without a model (``check``,
``forget``, ``erase``, ``compact``, ``migrate --to-database``).

The parser imports this module for ``--help``: it imports nothing heavy itself.
"""

from __future__ import annotations

import argparse

__all__ = ["given_bound", "maximum_entries", "store_bound"]


def maximum_entries(value: str) -> int:
    """The ``type`` of ``--maximum-entries``: a whole number from 1 to 1,000,000.

    Checked while parsing, so a bad bound is a usage error naming the option (exit code 2,
    with the usage line) and never reaches a store (which would make it exit code 1).

    Raises:
        argparse.ArgumentTypeError: not a whole number in range.
    """
    from game_memory.store.file_store import MAXIMUM_ENTRIES_LIMIT  # when parsed, not --help

    try:
        bound = int(value)
    except ValueError:
        bound = 0
    if not 1 <= bound <= MAXIMUM_ENTRIES_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAXIMUM_ENTRIES_LIMIT:,} (the most memories "
            f"the save may hold), not {value!r}"
        )
    return bound


def given_bound(args: argparse.Namespace) -> int | None:
    """``--maximum-entries`` as given (``None`` when left out): what ``open_memory`` and the
    PostgreSQL store take, ``None`` keeping their default (no bound for a database)."""
    bound = getattr(args, "maximum_entries", None)
    return bound if isinstance(bound, int) else None


def store_bound(args: argparse.Namespace) -> dict[str, int]:
    """The ``FileGameMemoryStore`` keyword arguments of ``--maximum-entries``: ``{}`` when it
    was not given, so the store keeps its own default (100,000)."""
    bound = given_bound(args)
    return {} if bound is None else {"maximum_entries": bound}
