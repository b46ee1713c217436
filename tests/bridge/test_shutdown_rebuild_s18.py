"""A ``memory.rebuild`` cut short by the shutdown says what stays (audit s18, bridge
finding 3).

The rebuild writes each batch's vectors before it embeds the next, so a rebuild the
shutdown cancels keeps the batches it wrote (``docs/protocol.md``, "Stopping"). Its
``-32009`` answer said "it changes nothing", the words of the other reads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer
from support.providers import FaultyProvider
from support.vectors import MemoryFactory, VectorStoreFactory, until

from .conftest import TOKEN, initialize, request


async def test_a_rebuild_abandoned_by_the_shutdown_says_its_written_batches_stay(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store(options={"rebuild_batch_size": 4})
    for number in range(8):  # saved without vectors: all pending
        await store.authoritative.append(make_memory(f"m{number}", tick=number))
    batches: list[int] = []
    never = asyncio.Event()

    async def stuck_on_the_second_batch(texts: Sequence[str]) -> None:
        batches.append(len(texts))
        if len(batches) == 2:
            await never.wait()  # until the shutdown cancels the rebuild

    provider.on_documents = stuck_on_the_second_batch
    server = BridgeServer(
        store, ServerInfo(mode=store.mode, model=None), BridgeLimits(shutdown_grace_seconds=0.05)
    )
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    await session.outbox.get()
    await session.receive(request("memory.rebuild", {"session_id": "session"}, 1))
    await until(lambda: len(batches) == 2, "the second batch")
    await server.shutdown()
    answer = None
    async with asyncio.timeout(10):
        while answer is None:
            text = await session.outbox.get()
            assert text is not None
            message = json.loads(text)
            if message.get("id") == 1:
                answer = message
    error = answer["error"]
    assert error["code"] == -32009 and error["data"]["kind"] == "ShuttingDown"
    assert "changes nothing" not in error["message"]
    assert "the batches it wrote stay, so calling it again resumes" in error["message"]
    # What the answer says is true: the first batch stayed, and a rebuild resumes.
    provider.on_documents = None
    kept = await store.get_status("session")
    assert (kept.ready_entries, kept.pending_entries) == (4, 4)
    embedded = len(provider.documents.texts)
    resumed = await store.rebuild("session")
    assert (resumed.ready_entries, resumed.pending_entries) == (8, 0)
    assert len(provider.documents.texts) - embedded == 4  # only the batch cut short
