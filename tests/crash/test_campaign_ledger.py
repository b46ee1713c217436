"""The SIGKILL campaign's check can fail: each broken promise it looks for is found.

Without this, a campaign reporting 0 losses could be a check that never looks. Each case
breaks one promise by hand (no process is killed) and expects ``verify`` to count it.
"""

from __future__ import annotations

from pathlib import Path

from game_memory import FileGameMemoryStore

from .campaign_ledger import EraseCall, Ledger, erased_vectors, verify
from .campaign_memories import memory, summary


async def _saved(save: Path, count: int) -> tuple[Ledger, list[str]]:
    ledger = Ledger()
    items = [memory(f"t-{number}") for number in range(count)]
    async with FileGameMemoryStore(save) as store:
        for item in items:
            await store.append(item)
            ledger.appended(item)
    return ledger, [item.memory_id for item in items]


async def test_a_sound_save_has_no_findings(tmp_path: Path) -> None:
    ledger, _ids = await _saved(tmp_path / "save", 20)
    findings = await verify(tmp_path / "save", tmp_path / "index", ledger)
    assert findings.problems == [] and not findings.lost


async def test_a_lost_memory_and_a_forget_not_kept_are_found(tmp_path: Path) -> None:
    save = tmp_path / "save"
    ledger, ids = await _saved(save, 20)
    ledger.appended(memory("never-written"))
    item = ledger.expected[ids[0]]
    ledger.forget_sent(item.memory_id, item.moment.tick + 1)
    ledger.forgot(item, item.moment.tick + 1)  # acknowledged, but never written
    findings = await verify(save, tmp_path / "index", ledger)
    assert findings.lost["append"] == 1 and findings.lost["forget"] >= 1


async def test_half_an_erase_is_found(tmp_path: Path) -> None:
    save = tmp_path / "save"
    ledger, _ids = await _saved(save, 20)
    first = ledger.expected[sorted(ledger.expected)[0]]
    same = [m for m in ledger.expected.values() if m.owner_id == first.owner_id][:2]
    same = [m for m in same if m.session_id == first.session_id]
    assert len(same) == 2
    call = EraseCall(
        first.session_id,
        first.owner_id,
        tuple(m.memory_id for m in same),
        frozenset(m.memory_id for m in same),
    )
    ledger.erase_sent(call)
    async with FileGameMemoryStore(save) as store:
        await store.erase(first.session_id, first.owner_id, [same[0].memory_id])  # half of it
    findings = await verify(save, tmp_path / "index", ledger)
    assert findings.half_erased == 1


async def test_an_erased_text_left_in_a_file_is_found(tmp_path: Path) -> None:
    save = tmp_path / "save"
    ledger, ids = await _saved(save, 20)
    item = ledger.expected[ids[3]]
    call = EraseCall(item.session_id, item.owner_id, (item.memory_id,), frozenset({ids[3]}))
    async with FileGameMemoryStore(save) as store:
        await store.erase(item.session_id, item.owner_id, [item.memory_id])
    ledger.erase_sent(call)
    ledger.erase_done(call)
    assert (await verify(save, tmp_path / "index", ledger)).erased_bytes_left == 0
    (save / "left.tmp").write_bytes(item.searchable_text.encode())  # a copy nobody removed
    assert (await verify(save, tmp_path / "index", ledger)).erased_bytes_left == 1


async def test_a_summary_whose_sources_are_still_recalled_is_found(tmp_path: Path) -> None:
    save = tmp_path / "save"
    ledger, _ids = await _saved(save, 20)
    first = ledger.expected[sorted(ledger.expected)[0]]
    made = summary("s-0", first.session_id, first.owner_id, first.moment.tick + 5)
    async with FileGameMemoryStore(save) as store:
        await store.append(made)  # a plain append: it retracts nothing
    stored = made.model_copy(update={"consolidates": (first.memory_id,)})
    ledger.consolidation_sent(stored)
    findings = await verify(save, tmp_path / "index", ledger)
    assert findings.lost["consolidate"] == 1


async def test_no_two_campaign_memories_share_a_vector() -> None:
    """The erase check takes an erased vector's bytes found in the index as left behind,
    which holds only if no other memory has that vector: ids of the campaign's shapes
    (rounds of up to 300 appends, concurrent appenders, summaries) all differ."""
    ids = [
        f"{kind}{round_}-{number}"
        for kind in "acs"
        for round_ in range(40)
        for number in range(300)
    ]
    vectors = await erased_vectors([memory(memory_id) for memory_id in ids])
    assert len(set(vectors)) == len(ids)
