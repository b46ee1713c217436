"""The parts of a partition's read-file chain: built from a cached partition, and merged.

A chain (``read_files.py``) covers a partition's first memories in consecutive parts, so a
read file never has to be rewritten whole when memories are added: :func:`part_of` builds
the part of the memories from a position on (only those are tokenized, digested and
located), and :func:`merge` joins consecutive parts into one from their arrays alone (no
memory is decoded or tokenized again), which the writer does in the background to keep a
chain short (``read_path.persist``).

Both work on what the store already checked: the partition's state as the cache holds it
(its segments' record offsets, its view's columns) and parts loaded and checked from disk.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory
from game_memory.store.packed_ids import joined_ids
from game_memory.store.postings import postings_of
from game_memory.store.read_files import (
    COLUMN_NAMES,
    Covered,
    Part,
    encode_terms,
    file_crc,
    file_times,
)
from game_memory.store.records import HEADER_BYTES
from game_memory.store.state import PartitionState

__all__ = ["merge", "part_of", "postings_of", "refreshed", "tables_extend"]

IntArray = npt.NDArray[np.int64]
Digests = Any  # Callable[[Sequence[GameMemory]], list[tuple[bytes, bytes]]]


def tables_extend(earlier: dict[str, list[str]], later: dict[str, list[str]]) -> bool:
    """Whether ``later``'s code tables extend ``earlier``'s (codes are only ever appended),
    so codes written with either mean the same strings."""
    return all(
        later[key][: len(earlier[key])] == earlier[key]
        for key in ("timelines", "scopes", "beliefs")
    )


def part_of(state: PartitionState, start: int, digests: Digests) -> Part | None:
    """The part of ``state``'s memories from position ``start`` to the end, or ``None`` when
    the partition's records do not line up with its memories one to one (copies of records
    an interrupted rewrite left: read whole until compacted) or a file cannot be read.

    Its files are the byte ranges of those memories' records: from the first one's offset
    in the file holding it (0 in the files after), to each file's last whole record, and
    every later segment of the series, even an empty one, so the chain names the series
    whole. Packs only ever come first: a part from ``start > 0`` never starts in one.
    """
    view = state.view
    if view is None or not 0 <= start < len(view):
        return None
    memories = view.memories
    files: list[Covered] = []
    numbers: list[IntArray] = []
    offsets: list[IntArray] = []
    lengths: list[IntArray] = []
    position = 0
    for pack in state.packs:
        count = len(pack.memories)
        if position + count > start:
            if start > position:
                return None
            index = pack.index
            first, length, _ = index.owners[state.owner_hash]
            times = file_times(index.path)
            crc = file_crc(index.path, first, first + length)
            if crc is None:
                return None
            name = os.path.basename(index.path)
            files.append(
                Covered(name, index.device, index.inode, first, first + length, crc, *times)
            )
            sizes = np.asarray(_record_lengths(index.path, first, first + length), np.int64)
            if sizes.size != count:
                return None
            numbers.append(np.full(count, len(files) - 1, np.int64))
            offsets.append(first + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64))
            lengths.append(sizes)
        position += count
    for segment in state.segments:
        count = len(segment.items)
        if segment.starts.size != count:
            return None
        # Skipped when its memories all lie before ``start`` (an earlier part covers it),
        # but not an empty segment at ``start``: the series is named whole.
        if position + count <= start and not (count == 0 and position == start):
            position += count
            continue
        skip = max(start - position, 0)
        begin = int(segment.starts[skip]) if skip < count else segment.end
        times = file_times(segment.path)
        crc = file_crc(segment.path, begin, segment.end)
        if crc is None:
            return None
        name = os.path.basename(segment.path)
        files.append(Covered(name, segment.device, segment.inode, begin, segment.end, crc, *times))
        starts = segment.starts[skip:].astype(np.int64)
        numbers.append(np.full(starts.size, len(files) - 1, np.int64))
        offsets.append(starts)
        lengths.append(np.diff(np.append(starts, segment.end)))
        position += count
    if position != len(memories):
        return None  # copies of records (an interrupted rewrite): read whole until compacted
    # Memories restored from read files are held lazily: reading them would decode them, so
    # what the part needs of them comes from the view's restored structures instead.
    restored = _restored(view)
    fresh: Sequence[GameMemory] = memories[max(start, restored) :]
    columns, tables = _columns(view.columns.export(), start)
    exported = _postings(view, fresh, start)
    hashes, content = _digests(view, fresh, start, digests)
    return Part(
        start,
        len(memories) - start,
        tuple(files),
        [memory.memory_id for memory in fresh] if start >= restored else _ids(view, start),
        np.concatenate(numbers).astype(np.uint32),
        np.concatenate(offsets).astype(np.int64),
        np.concatenate(lengths).astype(np.uint32),
        hashes,
        content,
        columns,
        tables,
        *exported,
        view.memory_scan,
    )


def _restored(view: Any) -> int:
    """How many leading memories of ``view`` were restored from read files (held lazily:
    reading them decodes them)."""
    prefix = view.prefix
    return prefix.count if prefix is not None else 0


def _ids(view: Any, start: int) -> list[str]:
    return list(itertools.islice(iter(view.positions), start, None))


def _columns(
    exported: tuple[dict[str, npt.NDArray[Any]], dict[str, list[str]]], start: int
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, list[str]]]:
    """The columns of memories ``start..`` (the view's code tables whole: codes are stable)."""
    arrays, tables = exported
    columns = {name: np.ascontiguousarray(arrays[name][start:]) for name in COLUMN_NAMES}
    tag_offsets = arrays["tag_offsets"].astype(np.int64)
    tag_documents = arrays["tag_documents"].astype(np.int64)
    kept: list[str] = []
    chunks: list[IntArray] = []
    for number, tag in enumerate(tables["tags"]):
        documents = tag_documents[int(tag_offsets[number]) : int(tag_offsets[number + 1])]
        documents = documents[int(np.searchsorted(documents, start)) :]
        if documents.size:
            kept.append(tag)
            chunks.append(documents)
    columns["tag_offsets"] = np.concatenate(
        ([0], np.cumsum([chunk.size for chunk in chunks], dtype=np.int64))
    ).astype(np.int64)
    columns["tag_documents"] = np.concatenate(chunks) if chunks else np.empty(0, np.int64)
    return columns, {
        "timelines": list(tables["timelines"]),
        "scopes": list(tables["scopes"]),
        "beliefs": list(tables["beliefs"]),
        "tags": kept,
    }


def _postings(
    view: Any, fresh: Sequence[GameMemory], start: int
) -> tuple[bytes, IntArray, IntArray, npt.NDArray[np.int32], npt.NDArray[np.int32], IntArray]:
    """The postings of memories ``start..``: tokenized from ``fresh`` (those memories) alone,
    unless the part is the whole view and its index is built already (then exported), or
    it starts among restored memories (then the view's postings from ``start`` on)."""
    if start == 0 and "lexical" in view.__dict__:
        terms, offsets, documents, frequencies, lengths = view.lexical.export()
    elif start < _restored(view):
        terms, offsets, documents, frequencies, lengths = _from(view.lexical.export(), start)
    else:
        terms, offsets, documents, frequencies, lengths = postings_of(fresh, start)
    blob, term_offsets = encode_terms(terms)
    return (
        blob,
        term_offsets,
        np.asarray(offsets, np.int64),
        np.asarray(documents, np.int32),
        np.asarray(frequencies, np.int32),
        np.asarray(lengths, np.int64),
    )


def _from(exported: Any, start: int) -> Any:
    """Exported postings restricted to documents ``start..`` (terms left without one go)."""
    terms, offsets, documents, frequencies, lengths = exported
    keep = documents >= start
    counts = np.add.reduceat(keep.astype(np.int64), offsets[:-1]) if len(terms) else offsets[:0]
    counts = np.where(np.diff(offsets) > 0, counts, 0)
    present = counts > 0
    kept_terms = [term for term, hit in zip(terms, present.tolist(), strict=True) if hit]
    kept_offsets = np.concatenate(([0], np.cumsum(counts[present]))).astype(np.int64)
    return kept_terms, kept_offsets, documents[keep], frequencies[keep], lengths[start:]


def _digests(
    view: Any, fresh: Sequence[GameMemory], start: int, digests: Digests
) -> tuple[bytes, bytes]:
    """``sha256(id)`` and content digests of memories ``start..``: the restored ones' from
    the view's read files, ``fresh``'s computed."""
    prefix = view.prefix
    hashes: list[bytes] = []
    content: list[bytes] = []
    if start < _restored(view):
        hashes.append(prefix.hashes[32 * start :])
        content.append(prefix.digests[32 * start :])
    for hashed, digest in digests(fresh):
        hashes.append(hashed)
        content.append(digest)
    return b"".join(hashes), b"".join(content)


def refreshed(part: Part, session_directory: str) -> Part | None:
    """``part`` with each covered file's identity as the file is now, its CRC checked again
    where the file is not exactly the one the CRC was taken of (a copy of the save, a
    segment grown since); ``None`` if a range no longer holds the bytes it recorded. A
    merged part then names the files as they are, so later opens skip their CRCs."""
    files: list[Covered] = []
    for covered in part.files:
        path = os.path.join(session_directory, covered.name)
        if covered.unchanged(path):
            files.append(covered)
            continue
        try:
            info = os.lstat(path)
        except OSError:
            return None
        times = file_times(path)
        if file_crc(path, covered.start, covered.end) != covered.crc:
            return None
        files.append(
            Covered(
                covered.name,
                info.st_dev,
                info.st_ino,
                covered.start,
                covered.end,
                covered.crc,
                *times,
            )
        )
    return Part(
        part.start,
        part.count,
        tuple(files),
        part.ids,
        part.location_files,
        part.location_offsets,
        part.location_lengths,
        part.hashes,
        part.digests,
        part.columns,
        part.tables,
        part.term_blob,
        part.term_offsets,
        part.posting_offsets,
        part.posting_documents,
        part.posting_frequencies,
        part.lengths,
        part.scan,
    )


def merge(parts: Sequence[Part]) -> Part:
    """Consecutive parts as one (their arrays joined; the postings merged per term with
    numpy: no memory is decoded or tokenized). The last part's tables and scan are the
    merged part's: they extend the earlier ones.

    Raises:
        ValueError: the parts are not consecutive, or their code tables disagree.
    """
    first = parts[0]
    for earlier, later in itertools.pairwise(parts):
        if later.start != earlier.end or not tables_extend(earlier.tables, later.tables):
            raise ValueError("the parts do not continue one another")
    last = parts[-1]
    files: list[Covered] = []
    numbers: list[npt.NDArray[np.uint32]] = []
    for part in parts:
        numbers.append((part.location_files.astype(np.int64) + len(files)).astype(np.uint32))
        files.extend(part.files)
    columns = {
        name: np.concatenate([part.columns[name] for part in parts]) for name in COLUMN_NAMES
    }
    tags: dict[str, list[IntArray]] = {}
    for part in parts:
        offsets = part.columns["tag_offsets"]
        documents = part.columns["tag_documents"]
        for number, tag in enumerate(part.tables["tags"]):
            tags.setdefault(tag, []).append(
                documents[int(offsets[number]) : int(offsets[number + 1])]
            )
    ordered_tags = sorted(tags)
    chunks = [np.concatenate(tags[tag]).astype(np.int64) for tag in ordered_tags]
    columns["tag_offsets"] = np.concatenate(
        ([0], np.cumsum([chunk.size for chunk in chunks], dtype=np.int64))
    ).astype(np.int64)
    columns["tag_documents"] = np.concatenate(chunks) if chunks else np.empty(0, np.int64)
    tables = {key: list(last.tables[key]) for key in ("timelines", "scopes", "beliefs")}
    tables["tags"] = ordered_tags
    blob, term_offsets, posting_offsets, documents, frequencies = _merge_postings(parts)
    return Part(
        first.start,
        sum(part.count for part in parts),
        tuple(files),
        joined_ids([part.ids for part in parts], pack=True),
        np.concatenate(numbers),
        np.concatenate([part.location_offsets for part in parts]).astype(np.int64),
        np.concatenate([part.location_lengths for part in parts]).astype(np.uint32),
        b"".join(part.hashes for part in parts),
        b"".join(part.digests for part in parts),
        columns,
        tables,
        blob,
        term_offsets,
        posting_offsets,
        documents,
        frequencies,
        np.concatenate([part.lengths for part in parts]).astype(np.int64),
        last.scan,
    )


#: Bytes of the terms' sort keys (:func:`_keys`): terms of this length or longer that
#: share these bytes are told apart one by one.
_KEY_BYTES = 24

Postings = tuple[bytes, IntArray, IntArray, npt.NDArray[np.int32], npt.NDArray[np.int32]]


def _merge_postings(parts: Sequence[Part]) -> Postings:
    """The parts' postings as one sorted term table, each term's postings in the parts'
    order (documents ascending, as parts come in order).

    Folded from the last part: each part's postings go into the merged ones of the parts
    after it by :func:`_inserted`, in time of the arrays' size (numpy inserts; at 100k
    memories and 102k terms, a close merging 1,050 new memories into the first part took
    28 ms as a search per new term in Python, 13 this way; a sort of every posting by its
    place in the union of the terms about 100). Terms holding a zero byte (the tokenizer
    never makes one) take :func:`_general_merge`."""
    merged = _postings_of(parts[-1])
    for part in reversed(parts[:-1]):
        folded = _inserted(_postings_of(part), merged)
        if folded is None:
            return _general_merge(parts)
        merged = folded
    return merged


def _postings_of(part: Part) -> Postings:
    return (
        part.term_blob,
        part.term_offsets.astype(np.int64, copy=False),
        part.posting_offsets.astype(np.int64, copy=False),
        part.posting_documents.astype(np.int32, copy=False),
        part.posting_frequencies.astype(np.int32, copy=False),
    )


def _general_merge(parts: Sequence[Part]) -> Postings:
    """:func:`_merge_postings` for any terms: each posting takes its term's place in the
    union of the terms, and a stable sort by that place keeps the parts' order."""
    lists = [_terms(part) for part in parts]
    union = sorted(set().union(*lists))
    place = {term: number for number, term in enumerate(union)}
    places: list[IntArray] = []
    for part, terms in zip(parts, lists, strict=True):
        mapped = np.fromiter((place[term] for term in terms), np.int64, len(terms))
        places.append(np.repeat(mapped, np.diff(part.posting_offsets)))
    at = np.concatenate(places) if places else np.empty(0, np.int64)
    order = np.argsort(at, kind="stable")
    documents = np.concatenate([part.posting_documents for part in parts])[order]
    frequencies = np.concatenate([part.posting_frequencies for part in parts])[order]
    counts = np.bincount(at, minlength=len(union)) if at.size else np.zeros(len(union), np.int64)
    posting_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    term_offsets = np.concatenate(([0], np.cumsum([len(term) for term in union]))).astype(np.int64)
    return (
        b"".join(union),
        term_offsets,
        posting_offsets,
        documents.astype(np.int32),
        frequencies.astype(np.int32),
    )


def _inserted(first: Postings, later: Postings) -> Postings | None:
    """The postings of ``first`` then ``later``: each term of ``later`` goes after
    ``first``'s postings of that term, or, new, before ``first``'s first term above it,
    where its bytes go into the term table too. ``None`` when a term holds a zero byte."""
    blob_bytes, term_offsets, posting_offsets, documents, frequencies = first
    later_bytes, later_offsets, later_posting_offsets, later_documents, later_frequencies = later
    blob = np.frombuffer(blob_bytes, np.uint8)
    later_blob = np.frombuffer(later_bytes, np.uint8)
    if not (np.all(blob) and np.all(later_blob)):
        return None
    if later_offsets.size <= 1:
        return first
    lows, present = _places(blob, term_offsets, later_blob, later_offsets)
    sizes = np.diff(later_posting_offsets)
    at = np.repeat(posting_offsets[lows + present], sizes)  # after the term's own, if any
    counts = np.diff(posting_offsets)
    counts[lows[present]] += sizes[present]
    new = ~present
    inserted = lows[new]
    later_lengths = np.diff(later_offsets)
    new_lengths = later_lengths[new]
    counts = np.insert(counts, inserted, sizes[new])
    lengths = np.insert(np.diff(term_offsets), inserted, new_lengths)
    merged_blob = np.insert(
        blob,
        np.repeat(term_offsets[inserted], new_lengths),
        later_blob[np.repeat(new, later_lengths)],
    )
    return (
        merged_blob.tobytes(),
        np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        np.insert(documents, at, later_documents).astype(np.int32, copy=False),
        np.insert(frequencies, at, later_frequencies).astype(np.int32, copy=False),
    )


def _places(
    blob: npt.NDArray[np.uint8],
    offsets: IntArray,
    later_blob: npt.NDArray[np.uint8],
    later_offsets: IntArray,
) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """For each sorted term of ``later_blob``: the first sorted term of ``blob`` not below
    it, and whether that term is it. Searched in C on the terms' keys; the few terms at
    least a key long whose key a term of ``blob`` shares are settled among those terms."""
    keys = _keys(blob, offsets)
    wanted = _keys(later_blob, later_offsets)
    lows = np.searchsorted(keys, wanted, "left").astype(np.int64)
    highs = np.searchsorted(keys, wanted, "right").astype(np.int64)
    present = highs > lows  # a term shorter than a key is the one term of its key
    shared = present & (np.diff(later_offsets) >= _KEY_BYTES)
    for number in np.flatnonzero(shared).tolist():
        text = bytes(later_blob[later_offsets[number] : later_offsets[number + 1]])
        low, high = int(lows[number]), int(highs[number])
        end = high
        while low < high:  # a binary search: a key many terms share costs no more
            middle = (low + high) // 2
            if bytes(blob[offsets[middle] : offsets[middle + 1]]) < text:
                low = middle + 1
            else:
                high = middle
        lows[number] = low
        present[number] = low < end and bytes(blob[offsets[low] : offsets[low + 1]]) == text
    return lows, present


def _keys(blob: npt.NDArray[np.uint8], offsets: IntArray) -> npt.NDArray[Any]:
    """Each term's first :data:`_KEY_BYTES` bytes, zeros past its end, as fixed-width byte
    strings: sorted terms without zero bytes have non-decreasing keys (a term that is a
    prefix of another has zeros where the other has bytes), and terms shorter than a key
    that share one are equal."""
    starts, lengths = offsets[:-1], np.diff(offsets)
    padded = np.concatenate((blob, np.zeros(_KEY_BYTES, np.uint8)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, _KEY_BYTES)[starts]
    windows *= np.arange(_KEY_BYTES) < lengths[:, None]  # the next terms' bytes zeroed
    return windows.view(f"S{_KEY_BYTES}").ravel()


def _terms(part: Part) -> list[bytes]:
    blob = part.term_blob
    return [blob[a:b] for a, b in itertools.pairwise(part.term_offsets.tolist())]


def _record_lengths(path: str, start: int, end: int) -> list[int]:
    """The whole lengths of the records back to back in ``path`` from ``start`` to ``end``."""
    lengths: list[int] = []
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        data = file.read(end - start)
    position = 0
    while position + HEADER_BYTES <= len(data):
        length = HEADER_BYTES + int.from_bytes(data[position + 4 : position + 8], "little")
        lengths.append(length)
        position += length
    return lengths
