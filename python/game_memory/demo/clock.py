"""The demo's game clock: ticks are in-game minutes, and a day has 1,440 of them.

Pure functions that turn ticks into what a player reads ("Day 2, 06:10", "1 day 3 h
earlier"); nothing here reads the wall clock.
"""

from __future__ import annotations

__all__ = ["TICKS_PER_DAY", "TICKS_PER_HOUR", "describe_age", "format_tick", "tick_of"]

TICKS_PER_HOUR = 60
TICKS_PER_DAY = 24 * TICKS_PER_HOUR


def tick_of(day: int, hour: int, minute: int = 0) -> int:
    """Return the tick of ``Day day, hour:minute`` (day 1 starts at tick 0).

    Raises:
        ValueError: A day below 1, an hour outside 0..23 or a minute outside 0..59.
    """
    if day < 1 or not 0 <= hour < 24 or not 0 <= minute < 60:
        raise ValueError(f"Day {day}, {hour:02d}:{minute:02d} is not a time of the demo's clock")
    return (day - 1) * TICKS_PER_DAY + hour * TICKS_PER_HOUR + minute


def format_tick(tick: int) -> str:
    """Return ``"Day D, HH:MM"`` for a tick (negative ticks are ``"before Day 1"``)."""
    if tick < 0:
        return "before Day 1"
    day, minutes = divmod(tick, TICKS_PER_DAY)
    hour, minute = divmod(minutes, TICKS_PER_HOUR)
    return f"Day {day + 1}, {hour:02d}:{minute:02d}"


def describe_age(ticks: int | None) -> str:
    """Say how long before the question a memory happened, in game time (``"2 h 5 min"``).

    ``None`` (no moment to measure from) reads ``"-"``.
    """
    if ticks is None:
        return "-"
    if ticks <= 0:
        return "just now"
    days, minutes = divmod(ticks, TICKS_PER_DAY)
    hours, minutes = divmod(minutes, TICKS_PER_HOUR)
    parts: list[str] = []
    if days:
        parts.append(f"{days} day" + ("s" if days > 1 else ""))
    if hours:
        parts.append(f"{hours} h")
    if minutes and not days:
        parts.append(f"{minutes} min")
    return " ".join(parts) + " ago"
