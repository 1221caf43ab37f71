"""Methods as their papers name them, in the order every table lists them and the colour every
figure draws them in, all read from the results, never from the method registry: the collect job
writes each method's record into summary.json (the header's `method_records`, from
`methods.display_records`), and `shown(records)` makes them the names of the report being rendered. A
report thus renders again from a results folder on a machine without the plugins that produced
it. A method without a record keeps its own name, comes after the others, alphabetically, and
gets a colour of its own."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator

_shown: ContextVar[dict[str, dict]] = ContextVar("method_records", default={})


@contextmanager
def shown(records: dict[str, dict] | None) -> Iterator[None]:
    """Name, order and colour methods by `records` (summary.json's `method_records`) inside the block."""
    token = _shown.set(dict(records or {}))
    try:
        yield
    finally:
        _shown.reset(token)


def _record(method: str) -> dict:
    return _shown.get().get(method, {})


def display_name(method: str) -> str:
    """A method's name as its paper writes it; a method without a record keeps its own name."""
    return _record(method).get("display", method)


def rank(method: str) -> tuple[float, str]:
    """Sort key: the record's `order`, methods without one after, alphabetically."""
    return (_record(method).get("order", float("inf")), method)


def ordered(methods: Iterable[str]) -> list[str]:
    """Methods in their records' order; those without one after, alphabetically."""
    return sorted(set(methods), key=rank)


def colour(method: str) -> str:
    """A method's colour in every figure, the same on every task and in every run: its record's."""
    return _record(method).get("colour") or f"C{(len(_shown.get()) + sum(map(ord, method))) % 10}"


def bibtex(method: str) -> str:
    """The BibTeX entry of the method's paper; empty for none."""
    return _record(method).get("bibtex", "")
