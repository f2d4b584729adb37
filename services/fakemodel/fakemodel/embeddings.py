"""Deterministic embeddings for ``POST /v1/embeddings``: a hashed bag of words.

Each word is lower-cased, mapped through a small synonym table and a crude stemmer, then
hashed (SHA-256, so the same on every run and machine) into one of ``DIMENSIONS`` buckets;
the vector is normalised to length 1. Texts sharing words score high; so do paraphrases
built from the synonym table (``physician``/``doctor``, ``kids``/``children``), which a
text index alone does not match. Common words are left out.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct

DIMENSIONS = 256
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be by can do does for from how i if in is it its me my of on or "
    "our should so that the their them they this to was we what when which who why will "
    "with you your".split()
)
# Each group is one meaning: every word of it embeds as the first.
_SYNONYMS = [
    ("doctor", "physician", "medic", "clinician", "gp"),
    ("child", "children", "kid", "kids", "toddler", "infant"),
    ("dose", "dosage", "dosing", "amount", "quantity"),
    ("medicine", "medication", "drug", "drugs", "pill", "pills", "tablet", "tablets"),
    ("weight", "kilogram", "kilograms", "kg", "bodyweight"),
    ("check", "verify", "confirm", "double"),
    ("car", "automobile", "vehicle"),
    ("buy", "purchase", "acquire"),
    ("money", "refund", "reimbursement", "repayment"),
    ("contract", "agreement"),
    ("landlord", "lessor", "owner"),
    ("tenant", "renter", "lessee"),
]
_CANON = {word: group[0] for group in _SYNONYMS for word in group}


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _token(word: str) -> str:
    word = word.casefold()
    if word in _CANON:
        return _CANON[word]
    stemmed = _stem(word)
    return _CANON.get(stemmed, stemmed)


def embed(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    vector = [0.0] * dimensions
    for raw in _WORD.findall(text):
        if raw.casefold() in _STOP:
            continue
        digest = hashlib.sha256(_token(raw).encode()).digest()
        bucket = int.from_bytes(digest[:4], "big") % dimensions
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        vector[0] = 1.0  # a text without words still gets a valid unit vector
        return vector
    return [x / norm for x in vector]


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """``float``: the list; ``base64``: little-endian float32 bytes, as the SDK expects."""
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector
