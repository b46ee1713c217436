"""Saves built and asked through ``game_memory.open_memory``, as a game would open them.

The belief-update and reranker-promise scripts use this: one save per mode in a temporary
folder, filled once, then reopened with each configuration to measure (the derived index
is reused, so reopening costs no embedding).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from retrieval_record import TIMELINE, to_memory
from retrieval_sets import Dataset, MemoryRow

from game_memory import (
    FusionOptions,
    GameAwareMemoryRerankerOptions,
    GameMemoryQuery,
    GameMoment,
    RecallHit,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
    open_memory,
)

__all__ = ["MODES", "FrontDoor", "ask", "fill"]

MODES = ("hybrid", "lexical")


class FrontDoor:
    """Opens one save in one mode with given weights; checks the mode is the one asked."""

    def __init__(self, save: Path, mode: str, home: Path | None, model: str = "default") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.save, self.mode, self.home, self.model = save, mode, home, model

    async def open(
        self,
        reranker: GameAwareMemoryRerankerOptions | None = None,
        fusion: FusionOptions | None = None,
    ) -> VectorMemoryStore:
        """``open_memory`` with the model (hybrid; the default one unless another was
        given) or none (lexical)."""
        options = VectorMemoryStoreOptions(fusion=fusion or FusionOptions())
        memory = await open_memory(
            self.save,
            model=self.model if self.mode == "hybrid" else "lexical",
            options=options,
            reranker=reranker,
            home=os.fspath(self.home) if self.home is not None else None,
        )
        if memory.mode != self.mode:
            await memory.aclose()
            raise RuntimeError(
                f"open_memory opened {self.save} in {memory.mode} mode, not {self.mode}: "
                f"{memory.notice or 'no notice'} (run 'game-memory models prepare')"
            )
        return memory


async def fill(door: FrontDoor, session: str, rows: Iterable[MemoryRow]) -> int:
    """Append ``rows`` through the front door; return how many memories the save holds."""
    dataset = Dataset(session, "", (), ())
    memory = await door.open()
    try:
        count = 0
        for row in rows:
            await memory.append(to_memory(dataset, row))
            count += 1
        if door.mode == "hybrid":
            status = await memory.get_status(session)
            if status.ready_entries != count:
                raise RuntimeError(f"only {status.ready_entries} of {count} memories have vectors")
        return count
    finally:
        await memory.aclose()


async def ask(
    memory: VectorMemoryStore, session: str, owner: str, text: str, tick: int, limit: int = 10
) -> Sequence[RecallHit]:
    """Recall ``text`` of ``owner`` as of ``tick``; a hybrid recall must not fall back."""
    result = await memory.recall(
        GameMemoryQuery(
            session_id=session,
            owner_id=owner,
            text=text,
            limit=limit,
            at_or_before=GameMoment(timeline_id=TIMELINE, tick=tick),
        )
    )
    if memory.mode == "hybrid" and result.fallback:
        raise RuntimeError(f"recall of {text!r} fell back to lexical")
    return result.hits
