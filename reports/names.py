"""Methods as their papers name them, in the order every table and figure lists them: both read
from the method registry's records (methods/__init__.py)."""

from methods import METHODS


def display_name(method: str) -> str:
    """A method's name as its paper writes it; an unknown method keeps its own name."""
    return METHODS[method].display if method in METHODS else method


def rank(method: str) -> tuple[float, str]:
    """Sort key: the registry's `order`, unknown methods after, alphabetically."""
    return (METHODS[method].order if method in METHODS else float("inf"), method)


def ordered(methods) -> list[str]:
    """Methods in the registry's order; unknown ones after, alphabetically."""
    return sorted(set(methods), key=rank)
