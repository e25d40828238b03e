"""Participants' tokens and the admin key.

A token is HMAC-SHA256(study secret, "study id:participant id"), base64url: the server stores no
token and checks one in a microsecond or two, which the 50 000-report batches need. A block
token is HMAC-SHA256(study secret, "study id:block:start:stop"), issued with an enrollment batch
of the consecutive ids start..stop-1: it stands for the tokens of those participants, whose
holder it was given to, and for no other (the two messages cannot coincide: a participant's
names one integer after the study id). A lease token is HMAC-SHA256(study secret,
"study id:lease:serial:start:stop"): the serial numbers a study's leases, so a block leased again
after its first lease expired gets a new token and the old holder's no longer enrolls it.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from fedldp.server.errors import AdminKeyInvalid, AdminKeyRequired

__all__ = [
    "TokenCache",
    "block_token_for",
    "block_token_ok",
    "check_admin",
    "lease_token_for",
    "lease_token_ok",
    "new_secret",
    "token_for",
    "token_ok",
    "tokens_for",
]

_MAC_BYTES = 32
_TOKEN_CHARS = 43
"""Unpadded base64 of a 32-byte MAC: 42⅔ characters, the last one's low bits zero."""


def new_secret() -> str:
    return secrets.token_hex(32)


def token_for(secret: str, study_id: str, participant_id: int) -> str:
    return tokens_for(secret, study_id, [participant_id])[0]


def tokens_for(secret: str, study_id: str, participant_ids: Iterable[int]) -> list[str]:
    """The tokens of many participants, as ``token_for`` gives them one by one, at a third of
    the cost (enrollment batches make tens of thousands): the HMAC of the key and the common
    "study id:" prefix is computed once and copied for each participant, and the MACs are
    base64-encoded in one call, each followed by a zero byte. 33 bytes make 44 characters with
    no padding; the first 43 are the MAC's own unpadded encoding, since the zero byte only adds
    the zero low bits that unpadded base64 puts in the 43rd character anyway."""
    prefix = hmac.new(bytes.fromhex(secret), f"{study_id}:".encode(), "sha256")
    macs: list[bytes] = []
    for pid in participant_ids:
        h = prefix.copy()
        h.update(str(pid).encode())
        macs.append(h.digest())
    if not macs:
        return []
    text = base64.urlsafe_b64encode(b"\0".join(macs) + b"\0").decode()
    step = 4 * (_MAC_BYTES + 1) // 3
    return [text[i : i + _TOKEN_CHARS] for i in range(0, len(text), step)]


def block_token_for(secret: str, study_id: str, start: int, stop: int) -> str:
    """The token of the participants ``start`` to ``stop - 1`` together."""
    mac = hmac.digest(bytes.fromhex(secret), f"{study_id}:block:{start}:{stop}".encode(), "sha256")
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def lease_token_for(secret: str, study_id: str, serial: int, start: int, stop: int) -> str:
    """The token of lease ``serial`` of a study, of the ids ``start`` to ``stop - 1``."""
    message = f"{study_id}:lease:{serial}:{start}:{stop}".encode()
    mac = hmac.digest(bytes.fromhex(secret), message, "sha256")
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def lease_token_ok(
    secret: str, study_id: str, serial: int, start: int, stop: int, token: str
) -> bool:
    return _same(lease_token_for(secret, study_id, serial, start, stop), token)


def block_token_ok(secret: str, study_id: str, start: int, stop: int, token: str) -> bool:
    return _same(block_token_for(secret, study_id, start, stop), token)


def _same(expected: str, given: str) -> bool:
    # as bytes: compare_digest raises TypeError on str with non-ASCII characters (and a JSON
    # string may hold lone surrogates, which only "surrogatepass" encodes)
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def token_ok(secret: str, study_id: str, participant_id: int, token: str) -> bool:
    return _same(token_for(secret, study_id, participant_id), token)


_CHUNK = 4096
"""Participant ids per block of the token cache (a study's ids are mostly consecutive)."""
_UNKNOWN = -1
"""A cache slot with no verified token: ``hash`` never returns -1 (CPython maps it to -2)."""
_EMPTY_BLOCK = array("q", [_UNKNOWN]) * _CHUNK


class TokenCache:
    """Tokens already verified, per study: a batch agent asks with the same 10 000 tokens at
    every poll and every report batch, and recomputing each HMAC was a third of the server's time
    on the batch path.

    A verified token is kept as its ``hash`` (64-bit SipHash, keyed per process unless
    PYTHONHASHSEED fixes the key) in an ``array('q')`` block of ``_CHUNK`` ids: 8 bytes a
    token, where a dict of id → token string took about 145 (bench_ingest's server grew by
    54 MiB over 400 000 tokens of one study, which the old bound never dropped). Only a token
    that passed the HMAC is cached; a token is then accepted from the cache when its hash equals
    the verified one's, so a forgery, which knows neither the verified token nor its hash,
    passes with probability 2^-64 a try. A slot holds ``_UNKNOWN`` until verified. Bounded: past
    ``capacity`` slots (8 MiB at the default), the least recently added studies go, and a study
    that alone overflows the cache starts again empty; a token no longer cached is recomputed
    when it comes back."""

    def __init__(self, capacity: int = 1_000_000) -> None:
        self.capacity = capacity
        self._known: OrderedDict[str, dict[int, array[int]]] = OrderedDict()
        self._size = 0  # slots allocated, _CHUNK a block (threads may race on it: a bound)
        self._lock = threading.Lock()

    def ok(self, secret: str, study_id: str, participant_id: int, token: str) -> bool:
        return self.verify(secret, study_id, [participant_id], [token])[0]

    def verify(
        self, secret: str, study_id: str, participant_ids: Sequence[int], tokens: Sequence[str]
    ) -> list[bool]:
        """Whether each participant's token is valid; the ones not cached yet are computed
        together (``tokens_for``)."""
        blocks = self._known.get(study_id)
        if blocks is None:
            with self._lock:
                blocks = self._known.setdefault(study_id, {})
        valid: list[bool] = []
        missed: list[int] = []
        for i, (pid, token) in enumerate(zip(participant_ids, tokens, strict=True)):
            block = blocks.get(pid // _CHUNK)
            known = _UNKNOWN if block is None else block[pid % _CHUNK]
            if known == _UNKNOWN:
                missed.append(i)
                valid.append(False)
            else:
                valid.append(known == hash(token))
        if not missed:
            return valid
        expected = tokens_for(secret, study_id, [participant_ids[i] for i in missed])
        for i, token in zip(missed, expected, strict=True):
            if _same(token, tokens[i]):
                valid[i] = True
                pid = participant_ids[i]
                block = blocks.get(pid // _CHUNK) or self._block(blocks, pid // _CHUNK)
                block[pid % _CHUNK] = hash(token)  # one store; racing threads store the same
        if self._size > self.capacity:
            self._evict(study_id)
        return valid

    def _block(self, blocks: dict[int, array[int]], index: int) -> array[int]:
        with self._lock:
            block = blocks.get(index)
            if block is None:
                block = blocks[index] = array("q", _EMPTY_BLOCK)
                self._size += _CHUNK
            return block

    def _evict(self, keep: str) -> None:
        """Drop the least recently added studies but ``keep`` (the one being served) until the
        cache fits; if ``keep`` alone overflows it, empty that one."""
        with self._lock:
            for study_id in list(self._known):
                if self._size <= self.capacity:
                    return
                if study_id != keep:
                    self._size -= _CHUNK * len(self._known.pop(study_id))
            if self._size > self.capacity and keep in self._known:
                self._size -= _CHUNK * len(self._known[keep])
                self._known[keep] = {}


def check_admin(configured: str | None, given: str | None) -> None:
    """Admin requests need the configured key (none configured: open, for local runs)."""
    if configured is None:
        return
    if not given:
        raise AdminKeyRequired("this server requires the X-Admin-Key header for this request")
    if not hmac.compare_digest(configured.encode(), given.encode()):
        raise AdminKeyInvalid("the X-Admin-Key header does not match the server's admin key")
