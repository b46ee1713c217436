"""Every development set by name, and the seeded query sample both benchmarks use."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from retrieval_alice import load_chat_alice
from retrieval_chat import load_chat_cjk, load_chat_en
from retrieval_handwritten import load_npc_cjk, load_npc_time, load_paraphrase
from retrieval_sets import Dataset, load_faq, load_lee, load_npc

__all__ = ["CROSSVAL_SETS", "LOADERS", "SEED", "sample"]

SEED = 20240917

#: name → loader(wheel cache folder)
LOADERS: dict[str, Callable[[Path], Dataset]] = {
    "npc": lambda cache: load_npc(),
    "npc_no_game_time": lambda cache: load_npc(game_time=False),
    "lee_news": load_lee,
    "faq_pt": load_faq,
    "chat_en": load_chat_en,
    "chat_cjk": load_chat_cjk,
    "chat_alice": load_chat_alice,
    "npc_cjk": lambda cache: load_npc_cjk(),
    "npc_time": lambda cache: load_npc_time(),
    "paraphrase_en": lambda cache: load_paraphrase(),
}

#: The distinct sets cross-validation rotates over (``npc_no_game_time`` repeats ``npc``).
CROSSVAL_SETS = (
    "npc",
    "lee_news",
    "faq_pt",
    "chat_en",
    "chat_cjk",
    "chat_alice",
    "npc_cjk",
    "npc_time",
    "paraphrase_en",
)


def sample(dataset: Dataset, maximum: int) -> Dataset:
    """At most ``maximum`` queries (a seeded sample, in their order); 0 keeps all."""
    if maximum <= 0 or len(dataset.queries) <= maximum:
        return dataset
    chosen = sorted(random.Random(SEED).sample(range(len(dataset.queries)), maximum))
    return Dataset(
        dataset.name,
        dataset.source,
        dataset.memories,
        tuple(dataset.queries[i] for i in chosen),
        dataset.asked_at_tick,
        dataset.files,
    )
