"""The one checksum of data a run reads: SHA-256 over the SHA-256 of each of its parts, in a
fixed order. A text corpus' parts are its train, valid and test texts (dhwt.text.corpus, which
also names the token-id cache by it); a dataset's are its files (dhwt.languages.dataset). A run
records the checksum of its data when it is created and refuses data that no longer has it
(dhwt.runs.run.check_data).

Examples:
    >>> checksum([b"train text", b"valid text", b"test text"])[:16]
    '029b76fbc3037e46'
    >>> checksum([b"train text", b"valid text", b"test text!"])[:16] != '029b76fbc3037e46'
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def checksum(parts: Iterable[bytes]) -> str:
    """The hex SHA-256 over the SHA-256 digest of each part of `parts`, in order."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()
