"""Methods as their papers name them, in the order every table and figure lists them."""

METHOD_NAMES = {
    "base": "Base model",
    "mezo": "MeZO",
    "grpo": "GRPO",
    "fgrpo": "F-GRPO",
    "sft": "SFT (ESSA's warm start)",
    "essa": "ESSA",
    "essam": "ESSAM",
    "essam_f": "ESSAM-F",
    "randopt": "RandOpt",
    "corp": "CoRP",
    "sazo": "SAZO",
}
"""Method names as their papers write them, in the order the report lists methods."""


def display_name(method: str) -> str:
    """A method's name as its paper writes it; an unknown method keeps its own name."""
    return METHOD_NAMES.get(method, method)


def rank(method: str) -> tuple[int, str]:
    """Sort key: METHOD_NAMES order, unknown methods after, alphabetically."""
    order = list(METHOD_NAMES)
    return (order.index(method) if method in order else len(order), method)


def ordered(methods) -> list[str]:
    """Methods in METHOD_NAMES order; unknown ones after, alphabetically."""
    return sorted(set(methods), key=rank)
