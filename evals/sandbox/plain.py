"""Plain data across the sandbox's channel: the only values that pass between a program and its tests.

A value is plain when it is built, recursively, from None, bool, int, float, complex, str, bytes,
list, tuple, dict, set and frozenset, each of exactly that type (no subclass). `dumps` writes one
as JSON in which every container is an array tagged by its first element; `loads` reads that back
and refuses anything else. JSON, not pickle or marshal: reading it runs no code and builds no
object but these, whatever bytes arrive, so the tests' process can read what an untrusted program
wrote.

Both sides of the channel run this file: the program's process (evals/sandbox/child.py) and the
tests' (evals/sandbox/tester.py). It imports the standard library only.
"""

import json

# Bound now: the program shares the process of its side of the channel and may rebind builtins
# (`type`, `list`, a metaclass's `__name__`); what was bound before it ran still names the truth.
_type, _id, _format, _NAME = type, id, format, type.__dict__["__name__"].__get__
_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f", dict: "d", bytes: "b", complex: "c", int: "i"}
_SCALARS = (type(None), bool, float, str)
_SMALL = 2**63  # larger ints travel in hexadecimal: linear to read and write, whatever their size
# Looked up by the type's identity, never by its (metaclass's) __eq__ or __hash__.
_TAG_OF = {id(kind): tag for kind, tag in _TAGS.items()}
_SCALAR = {id(kind) for kind in _SCALARS}


class NotPlain(TypeError):
    """The value holds something that is not plain data; `args[0]` is that thing's type name."""


def dumps(value) -> bytes:
    """`value` as tagged JSON; NotPlain names the first type that is not plain data, ValueError a
    container that holds itself."""
    return json.dumps(_tagged(value, set()), separators=(",", ":")).encode()


def _tagged(value, path: set):
    kind = _type(value)
    if _id(kind) in _SCALAR or kind is int and -_SMALL < value < _SMALL:
        return value
    tag = _TAG_OF.get(_id(kind))
    if tag is None:
        raise NotPlain(_NAME(kind))
    if kind is int:
        return [tag, _format(value, "x")]
    if kind is bytes:
        return [tag, value.hex()]
    if kind is complex:
        return [tag, value.real, value.imag]
    if _id(value) in path:
        raise ValueError(f"a {_NAME(kind)} that holds itself")
    path.add(_id(value))
    items = [x for pair in value.items() for x in pair] if kind is dict else value
    tagged = [tag, *(_tagged(item, path) for item in items)]
    path.discard(_id(value))
    return tagged


def loads(data: bytes):
    """The plain value `data` encodes; ValueError for anything that is not an encoding of plain data."""
    try:
        return _untagged(json.loads(data))
    except (RecursionError, TypeError, KeyError, IndexError, UnicodeDecodeError) as error:
        raise ValueError(f"not an encoding of plain data ({type(error).__name__})") from None


def _untagged(item):
    kind = type(item)
    if kind in _SCALARS or kind is int:
        return item
    if kind is not list or not item or type(item[0]) is not str:
        raise ValueError("not an encoding of plain data")
    tag, rest = item[0], item[1:]
    if tag == "b" and len(rest) == 1 and type(rest[0]) is str:
        return bytes.fromhex(rest[0])
    if tag == "i" and len(rest) == 1 and type(rest[0]) is str:
        return int(rest[0], 16)
    if tag == "c" and len(rest) == 2 and all(type(part) in (int, float) for part in rest):
        return complex(rest[0], rest[1])
    if tag == "d" and len(rest) % 2 == 0:
        values = [_untagged(x) for x in rest]
        return dict(zip(values[::2], values[1::2]))
    builder = {"l": list, "t": tuple, "s": set, "f": frozenset}.get(tag)
    if builder is None:
        raise ValueError(f"not an encoding of plain data (tag {tag[:20]!r})")
    return builder(_untagged(x) for x in rest)
