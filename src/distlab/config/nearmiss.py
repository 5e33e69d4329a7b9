"""Unknown keys told apart from near-misses of a known key.

A key the schema does not allow is often a known key mistyped, and a mistyped key that looks
right is the worst kind: a Cyrillic 'ѕ' (U+0455) in ``seeds`` reads as ``seeds`` in every
editor.  Before a key is compared with the known ones it is folded to ASCII: compatibility
forms and accents split off (NFKD: fullwidth letters, ligatures, é), the accents dropped, and the Cyrillic and Greek
letters that look like Latin ones mapped to them.  A folded key equal to a known key, or close
to one (:func:`difflib.get_close_matches`), is named with it; a non-ASCII key is always named
with its first non-ASCII character's code point."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable

# Cyrillic and Greek letters drawn like Latin ones (lower and upper case)
_LOOKALIKES = {
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d",
    "ɡ": "g", "ӏ": "l", "ԛ": "q", "ԝ": "w", "ү": "y", "һ": "h",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C",
    "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J",
    "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
    "υ": "u", "χ": "x", "γ": "y",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2212": "-",
}


def fold(key: str) -> str:
    """``key`` with look-alike letters, compatibility forms and accents folded to ASCII where
    they have an ASCII look-alike (other characters are kept)."""
    text = unicodedata.normalize("NFKD", key)  # compatibility forms, accents split off
    text = "".join(_LOOKALIKES.get(ch, ch) for ch in text if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", text)


def _first_non_ascii(key: str) -> str:
    for i, ch in enumerate(key):
        if ord(ch) > 127:
            name = unicodedata.name(ch, "unnamed")
            return f"{ch!r} (U+{ord(ch):04X} {name}) at position {i}"
    return ""


def describe(key: str, known: Iterable[str]) -> str:
    """What to say of an unknown ``key`` beside the ``known`` keys of its mapping: the known key
    it is a look-alike or a near-miss of, and its non-ASCII character; '' when nothing is known."""
    known = sorted(str(k) for k in known)
    folded = fold(key)
    odd = _first_non_ascii(key)
    if folded in known and folded != key:
        return f"{key!r} is {folded!r} written with {odd or 'another form of a letter'}"
    close = difflib.get_close_matches(folded, known, n=1, cutoff=0.75)
    if close:
        with_odd = f" (it holds {odd})" if odd else ""
        return f"{key!r} is not a key here: did you mean {close[0]!r}?{with_odd}"
    if odd:
        return f"{key!r} holds {odd}, and no key here is like it"
    return ""


def unexpected_note(keys: Iterable[str], known: Iterable[str]) -> str:
    """One clause on the unexpected ``keys`` that are near-misses or non-ASCII ('' for none)."""
    known = list(known)
    notes = [n for n in (describe(str(k), known) for k in keys) if n]
    return "; ".join(notes)


def additional_note(error) -> str:
    """:func:`unexpected_note` for a jsonschema ``additionalProperties`` error: the keys of its
    instance that its schema's ``properties`` do not name."""
    known = (error.schema or {}).get("properties") or {}
    instance = error.instance if isinstance(error.instance, dict) else {}
    return unexpected_note([k for k in instance if k not in known], known)
