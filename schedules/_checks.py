"""Argument checks shared by the host reference functions (clear ValueErrors)."""

from __future__ import annotations


def check_int(name: str, value: object, minimum: int) -> None:
    """Raise ValueError unless value is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_schedule(s: object) -> None:
    """Raise ValueError unless s is a tlgemm.schedules.Schedule."""
    from .schedule import Schedule

    if not isinstance(s, Schedule):
        raise ValueError(f"schedule must be a tlgemm.schedules.Schedule, got {type(s).__name__}")


def check_index(name: str, value: object, bound: int, bound_name: str) -> None:
    """Raise ValueError unless 0 <= value < bound."""
    check_int(name, value, 0)
    if value >= bound:  # type: ignore[operator]
        raise ValueError(f"{name} must be < {bound_name}={bound}, got {value}")
