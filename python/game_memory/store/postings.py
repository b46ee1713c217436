"""The lexical index of one partition: token counts and an inverted index, extended and persisted.

:class:`LexicalIndex` holds, per memory in append order, its token count, and per term the
memories containing it with the term's frequency in each: what BM25 (``lexical.py``)
reads. An index built whole holds compressed rows (:func:`postings_of`'s arrays, the
terms in a :class:`TermTable`), as a restored one does; an index of a grown partition
extends the previous version's (only the new memories are tokenized) with postings of its
own. An index can be exported as compressed rows (terms, offsets,
documents, frequencies) and restored from them without tokenizing anything
(``read_files.py`` persists it); the restored part is read term by term on demand.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory
from game_memory.store.growing import Growing
from game_memory.store.tokenizer import MAXIMUM_TOKENS, joined_ascii, tokenize, tokenize_joined
from game_memory.strict_json import readable_json

__all__ = [
    "LexicalIndex",
    "PostingArrays",
    "TermTable",
    "document_text",
    "encode_terms",
    "postings_of",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_EMPTY_DOCUMENTS: IntArray = np.empty(0, np.int64)
_EMPTY_FREQUENCIES: FloatArray = np.empty(0, np.float64)

#: Exported postings: terms, offsets (int64, one more than terms), documents (int32),
#: frequencies (int32), lengths (int64).
PostingArrays = tuple[
    Sequence[str], IntArray, npt.NDArray[np.int32], npt.NDArray[np.int32], IntArray
]


def document_text(memory: GameMemory) -> str:
    """The text lexical search reads: searchable text, a newline, then the payload JSON with
    every escape as the character it stands for (``\\n`` a line break, ``\\u00e9`` ``é``) and
    its numbers as written (``strict_json.readable_json``): a word after an escaped line
    break is a word of its own. What this gives is part of ``tokenizer.TOKENIZER_ID``."""
    return (memory.searchable_text or "") + "\n" + readable_json(memory.payload_json)


#: Most term lookups a :class:`TermTable` keeps (a few hundred kilobytes at most).
FOUND_TERMS = 4_096


class TermTable(Sequence[str]):
    """Sorted terms as one UTF-8 blob and offsets: found by binary search, decoded on demand.

    Restoring a read file then creates no string per term (a partition of 100k memories
    has tens of thousands); UTF-8 byte order is code point order, the order they were
    sorted in (:meth:`LexicalIndex.export`).
    """

    def __init__(self, blob: bytes, offsets: IntArray) -> None:
        if offsets.ndim != 1 or offsets.size == 0 or int(offsets[0]) != 0:
            raise ValueError("the term offsets do not start at 0")
        if int(offsets[-1]) != len(blob) or bool(np.any(np.diff(offsets) < 0)):
            raise ValueError("the term offsets do not match the terms")
        self._blob = blob
        self._offsets = offsets
        self._found: dict[str, int] = {}  # term -> index, -1 when absent

    def __len__(self) -> int:
        return int(self._offsets.size) - 1

    @property
    def blob(self) -> bytes:
        """The terms' UTF-8 bytes, one after another."""
        return self._blob

    @property
    def offsets(self) -> IntArray:
        """Where each term starts in :attr:`blob` (one more than the terms)."""
        return self._offsets

    def _bytes(self, index: int) -> bytes:
        return self._blob[int(self._offsets[index]) : int(self._offsets[index + 1])]

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError("term index out of range")
        return self._bytes(index).decode("utf-8")

    def find(self, term: str) -> int | None:
        """The index of ``term``, or ``None``.

        A binary search (``bisect``, over the indexes, keyed by the term's bytes) reading
        each probed term's bounds with ``ndarray.item`` (a Python int, no numpy scalar): a
        recall looks up each query word once per view. The answers are kept (at most
        :data:`FOUND_TERMS`, then forgotten all at once): an NPC is asked about the same
        names and places again and again, and a kept answer costs a dictionary lookup
        instead of about 15 probes (5 µs).
        """
        found = self._found.get(term)
        if found is None:
            if len(self._found) >= FOUND_TERMS:
                self._found = {}
            searched = self._search(term)
            found = self._found[term] = -1 if searched is None else searched
        return None if found < 0 else found

    def _search(self, term: str) -> int | None:
        wanted = term.encode("utf-8")
        blob, offset = self._blob, self._offsets.item

        def term_at(index: int) -> bytes:
            return blob[offset(index) : offset(index + 1)]

        count = len(self)
        low = bisect.bisect_left(range(count), wanted, key=term_at)
        return low if low < count and term_at(low) == wanted else None


class _Rows:
    """Restored postings in compressed rows, shared (read-only) by every later version."""

    def __init__(self, exported: PostingArrays) -> None:
        terms, offsets, documents, frequencies, _ = exported
        self.terms: Sequence[str] = terms
        self._find = terms.find if isinstance(terms, TermTable) else None
        self._index = None if self._find else {term: at for at, term in enumerate(terms)}
        self.offsets = offsets
        self.documents = documents
        self.frequencies = frequencies

    def postings(self, term: str) -> tuple[IntArray, FloatArray] | None:
        index = self._find(term) if self._find is not None else self._index.get(term)  # type: ignore[union-attr]
        if index is None:
            return None
        start, stop = int(self.offsets[index]), int(self.offsets[index + 1])
        return (
            self.documents[start:stop].astype(np.int64),
            self.frequencies[start:stop].astype(np.float64),
        )


class _RowParts:
    """Restored postings of consecutive ranges of memories (a read-file chain's parts):
    a term's postings are its postings in each part, in part order (ascending documents)."""

    def __init__(self, parts: Sequence[_Rows]) -> None:
        self._parts = parts

    @property
    def terms(self) -> Sequence[str]:
        found: set[str] = set()
        for part in self._parts:
            found.update(part.terms)
        return sorted(found)

    def postings(self, term: str) -> tuple[IntArray, FloatArray] | None:
        found = [hit for hit in (part.postings(term) for part in self._parts) if hit is not None]
        if len(found) <= 1:
            return found[0] if found else None
        return (
            np.concatenate([documents for documents, _ in found]),
            np.concatenate([frequencies for _, frequencies in found]),
        )


def postings_of(
    memories: Sequence[GameMemory], start: int
) -> tuple[list[str], IntArray, npt.NDArray[np.int32], npt.NDArray[np.int32], IntArray]:
    """The exported postings (``LexicalIndex.export``'s arrays) of ``memories``, numbered
    from ``start``: the terms, documents, frequencies and token counts a counter of each
    memory's tokens gives (tested against one), built with one tokenization per memory,
    one C-level dictionary lookup per token and numpy, instead of a counter and posting
    lists per memory and term. What a read-file part holds, and what an index built whole
    holds (as compressed rows)."""
    count = len(memories)
    texts = [document_text(memory) for memory in memories]
    joined = joined_ascii(texts) if count > 1 else None
    if joined is not None:
        # ASCII texts (the usual case): one scan of all of them, each followed by a
        # separator that becomes a document boundary here (``tokenizer.tokenize_joined``).
        scanned = tokenize_joined(joined)
        found = sorted(dict.fromkeys(scanned))[1:]  # the separator sorts first: not a term
        numbers = {term: number for number, term in enumerate(found)}
        numbers["\x00"] = -1
        codes = np.fromiter(map(numbers.__getitem__, scanned), np.int64, len(scanned))
        marks = codes < 0
        owners: IntArray = np.cumsum(marks, dtype=np.int64)[~marks]  # texts before each token
        counts = np.bincount(owners, minlength=count).astype(np.int64)
        if int(counts.max()) <= MAXIMUM_TOKENS:  # else cut per text, below
            return _postings_arrays(found, codes[~marks], owners, counts, count, start)
    tokenized = [tokenize(text) for text in texts]
    lengths = np.fromiter(map(len, tokenized), np.int64, count)
    flat = list(itertools.chain.from_iterable(tokenized))
    terms = sorted(dict.fromkeys(flat))
    place = {term: number for number, term in enumerate(terms)}
    term_of = np.fromiter(map(place.__getitem__, flat), np.int64, len(flat))
    document_of = np.repeat(np.arange(count, dtype=np.int64), lengths)
    return _postings_arrays(terms, term_of, document_of, lengths, count, start)


def _postings_arrays(
    terms: list[str],
    term_of: IntArray,
    document_of: IntArray,
    lengths: IntArray,
    count: int,
    start: int,
) -> tuple[list[str], IntArray, npt.NDArray[np.int32], npt.NDArray[np.int32], IntArray]:
    """:func:`postings_of`'s arrays from every token's term and document."""
    keys, frequencies = np.unique(term_of * max(count, 1) + document_of, return_counts=True)
    term = keys // max(count, 1)
    per_term = (
        np.bincount(term, minlength=len(terms)) if keys.size else np.zeros(len(terms), np.int64)
    )
    offsets = np.concatenate(([0], np.cumsum(per_term))).astype(np.int64)
    documents = (keys % max(count, 1) + start).astype(np.int32)
    return terms, offsets, documents, frequencies.astype(np.int32), lengths


def encode_terms(terms: Sequence[str]) -> tuple[bytes, IntArray]:
    """Sorted terms as one UTF-8 blob and its offsets: what a :class:`TermTable` reads and
    a read-file part holds (``term_blob``/``term_offsets``); a :class:`TermTable`'s are
    its own (an exported index built whole holds one)."""
    if isinstance(terms, TermTable):
        return bytes(terms.blob), terms.offsets
    encoded = [term.encode("utf-8") for term in terms]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(list(map(len, encoded)), out=offsets[1:])
    return b"".join(encoded), offsets


class LexicalIndex:
    """Token counts and an inverted index (term → documents, frequencies) of a partition."""

    _postings: dict[str, tuple[IntArray, FloatArray]]
    _shared: dict[str, tuple[IntArray, FloatArray]]
    _rows: _Rows | _RowParts | None
    _rooms: dict[str, Growing]
    lengths: IntArray

    def __init__(self, memories: Sequence[GameMemory], base: LexicalIndex | None = None) -> None:
        if base is None:
            # Built whole (a partition parsed from its records): compressed rows, as a read
            # file restores them. Per term a dictionary entry and two arrays cost about
            # 3.3 KB per memory (1,000 NPCs of 100 memories: 330 MB); rows cost about 0.4.
            exported = postings_of(memories, 0)
            blob, offsets = encode_terms(exported[0])
            self._postings, self._shared, self._rooms = {}, {}, {}
            self._rows = _Rows((TermTable(blob, offsets), *exported[1:]))
            self.lengths = exported[4]
            return
        start = len(base.lengths)
        terms: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(len(memories) - start, dtype=np.int64)
        for offset in range(len(memories) - start):
            counts = Counter(tokenize(document_text(memories[start + offset])))
            lengths[offset] = sum(counts.values())
            for term, frequency in counts.items():
                documents, frequencies = terms.setdefault(term, ([], []))
                documents.append(start + offset)
                frequencies.append(frequency)
        # A grown index shares its base's postings (``_shared``, never written again) and
        # keeps the terms it changed since in its own dictionary, copied from the base's;
        # once that one holds more than about sqrt(26 * shared) terms (an append adds a
        # dozen) the two are merged into a new shared one. Copying every posting per append
        # cost the partition's vocabulary (2 ms at 100k memories with 100k distinct terms).
        shared, postings = base._shared, dict(base._postings)
        if len(postings) > max(1_024, math.isqrt(26 * len(shared))):
            shared, postings = {**shared, **postings}, {}
        for term, (documents, frequencies) in terms.items():
            new_documents = np.asarray(documents, np.int64)
            new_frequencies = np.asarray(frequencies, np.float64)
            previous = postings.get(term)
            if previous is None:
                previous = shared.get(term)
            if previous is not None:
                new_documents = np.concatenate((previous[0], new_documents))
                new_frequencies = np.concatenate((previous[1], new_frequencies))
            postings[term] = (new_documents, new_frequencies)
        self._postings, self._shared = postings, shared
        self._rows = base._rows
        self._rooms = {}
        # In the room the base's grows into (``growing.py``): no copy per append.
        self.lengths, self._rooms["lengths"] = Growing.extend(
            base.lengths, base._rooms.get("lengths"), lengths
        )
        counted = base.__dict__.get("counted_lengths")  # computed for the base
        if counted is not None:
            self.counted_lengths, self._rooms["counted"] = Growing.extend(
                counted, base._rooms.get("counted"), np.maximum(lengths, 1)
            )

    @classmethod
    def restore(cls, exported: PostingArrays, count: int) -> LexicalIndex:
        """The index of ``count`` memories from :meth:`export`'s arrays (checked shapes).

        Raises:
            ValueError: the arrays do not fit together.
        """
        return cls.restore_parts([exported], count)

    @classmethod
    def restore_parts(cls, parts: Sequence[PostingArrays], count: int) -> LexicalIndex:
        """The index of ``count`` memories from the arrays of consecutive ranges of them (a
        read-file chain, ``read_files.py``): each part's documents are positions in the
        partition, after those of the parts before it; its lengths are its memories' token
        counts. A term's postings are read from each part that has it.

        Raises:
            ValueError: the arrays do not fit together.
        """
        rows: list[_Rows] = []
        start = 0
        for exported in parts:
            terms, offsets, documents, frequencies, lengths = exported
            end = start + lengths.size
            if offsets.shape != (len(terms) + 1,) or int(offsets[0]) != 0:
                raise ValueError("the posting offsets do not match the terms")
            if int(offsets[-1]) != documents.size or documents.shape != frequencies.shape:
                raise ValueError("the postings do not match their offsets")
            if lengths.ndim != 1 or (
                documents.size and (int(documents.min()) < start or int(documents.max()) >= end)
            ):
                raise ValueError("the postings name memories the index does not hold")
            if np.any(np.diff(offsets) < 0):
                raise ValueError("the posting offsets are not ordered")
            rows.append(_Rows(exported))
            start = end
        if start != count:
            raise ValueError("the postings' token counts do not match the memories")
        index = cls.__new__(cls)
        index._postings, index._shared, index._rooms = {}, {}, {}
        index._rows = rows[0] if len(rows) == 1 else _RowParts(rows)
        if len(parts) == 1:  # a lone part's own array (a view of its read file's map)
            index.lengths = parts[0][4].astype(np.int64, copy=False)
        else:
            index.lengths = (
                np.concatenate([exported[4] for exported in parts]).astype(np.int64)
                if parts
                else np.empty(0, np.int64)
            )
        return index

    def export(self) -> PostingArrays:
        """Every posting as compressed rows (terms sorted), with the token counts."""
        rows = self._rows
        if isinstance(rows, _Rows) and not self._postings and not self._shared:
            # Rows alone (built whole, or restored from one part): they are the export.
            return (rows.terms, rows.offsets, rows.documents, rows.frequencies, self.lengths)
        terms = sorted(
            set(self._postings)
            | set(self._shared)
            | (set(self._rows.terms) if self._rows else set())
        )
        documents: list[IntArray] = []
        frequencies: list[FloatArray] = []
        counts: list[int] = []
        for term in terms:
            found, tf = self.postings(term)
            documents.append(found)
            frequencies.append(tf)
            counts.append(found.size)
        offsets = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)
        return (
            terms,
            offsets,
            np.concatenate(documents).astype(np.int32) if terms else np.empty(0, np.int32),
            np.concatenate(frequencies).astype(np.int32) if terms else np.empty(0, np.int32),
            self.lengths,
        )

    @functools.cached_property
    def counted_lengths(self) -> IntArray:
        """``max(1, length)`` per memory: the lengths BM25's average reads (read-only; a grown
        index extends its base's, when the base computed them)."""
        counted = np.maximum(self.lengths, 1)
        counted.flags.writeable = False
        return counted

    def postings(self, term: str) -> tuple[IntArray, FloatArray]:
        """Documents containing ``term`` and the term's frequency in each."""
        newer = self._postings.get(term)
        if newer is None:
            newer = self._shared.get(term)
        restored = self._rows.postings(term) if self._rows is not None else None
        if restored is None:
            return newer if newer is not None else (_EMPTY_DOCUMENTS, _EMPTY_FREQUENCIES)
        if newer is None:
            return restored
        return (
            np.concatenate((restored[0], newer[0])),
            np.concatenate((restored[1], newer[1])),
        )
