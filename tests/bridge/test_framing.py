"""The bounded line splitter of the stdio transport."""

from __future__ import annotations

from game_memory.bridge.framing import LineFramer, Oversized


def test_lines_are_split_across_chunks_and_crlf_is_removed() -> None:
    framer = LineFramer(100)
    assert framer.feed(b'{"a"') == []
    assert framer.feed(b':1}\r\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert framer.feed(b":3}\n") == [b'{"c":3}']


def test_blank_lines_are_skipped() -> None:
    assert LineFramer(100).feed(b"\n  \n\r\nx\n") == [b"x"]


def test_an_oversized_line_is_dropped_once_and_the_next_line_survives() -> None:
    framer = LineFramer(10)
    assert framer.feed(b"0123456789") == []
    assert framer.feed(b"abcdef") == []
    assert framer.feed(b"ghij" * 1_000) == []
    assert framer.feed(b"\nok\n") == [Oversized(10 + 6 + 4_000), b"ok"]


def test_a_line_of_exactly_the_bound_passes_even_with_crlf() -> None:
    framer = LineFramer(10)
    assert framer.feed(b"0123456789\r\n0123456789\n") == [b"0123456789", b"0123456789"]
    assert framer.feed(b"0123456789X\n") == [Oversized(11)]


def test_memory_stays_bounded_while_dropping() -> None:
    framer = LineFramer(10)
    for _ in range(100):
        framer.feed(b"x" * 10_000)
    assert len(framer._buffer) == 0


def test_end_returns_an_unterminated_last_line() -> None:
    framer = LineFramer(10)
    framer.feed(b"one\ntwo")
    assert framer.end() == [b"two"]
    assert framer.end() == []
    framer.feed(b"x" * 20)
    assert framer.end() == [Oversized(20)]
