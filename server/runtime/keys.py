"""Crypto-shredding of central-trust contributions: one AES-GCM key per study, kept outside the
reports database, destroyed when the study ends.

A central-trust study's contributions (each user's local mean and sample count) are stored
encrypted under a 256-bit key that lives in a file of its own in the key directory
(``Settings.key_dir``), never in the database. Deleting the rows alone leaves their bytes in
places the server does not control: SQLite's write-ahead log and free pages, PostgreSQL's data
files and pg_wal, backups. Destroying the key (overwritten, flushed, unlinked) when the study
finishes, fails or is cancelled makes every one of those copies ciphertext without a key.

A key file is written atomically (a temporary file in the same directory, fsynced, renamed over,
then the directory fsynced), so a crash leaves either no key or the whole key. Each stored
contribution is ``nonce || AES-GCM(key, nonce, row, aad)`` with the study, round and participant
as associated data, so a row cannot be moved to another participant or round undetected.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
import tempfile
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KeyMissing", "KeyStore", "default_key_dir"]

_KEY_BYTES = 32
_NONCE_BYTES = 12
_SUFFIX = ".key"
_STUDY_ID = re.compile(r"[0-9a-f]{32}")  # uuid4().hex, as fedldp.server.services.studies makes them


class KeyMissing(LookupError):
    """The study's key is not in the key store (destroyed, or the store is misconfigured)."""


def default_key_dir(database_url: str) -> Path:
    """Beside a SQLite file (``fedldp.db`` → ``fedldp.db.keys/``); otherwise (PostgreSQL, an
    in-memory SQLite) ``fedldp/keys`` in this user's state directory (``$XDG_STATE_HOME``, by
    default ``~/.local/state``).

    Never under the temporary directory: a restart may give the server another one (systemd's
    ``PrivateTmp``, a new container, ``TMPDIR``, a cleaned ``/tmp`` at boot), and a running
    central-trust study whose key is gone can take no report and never aggregate. Replicas on
    other hosts or containers still need one shared directory (``FEDLDP_KEY_DIR``)."""
    prefix = "sqlite:///"
    if database_url.startswith(prefix):
        path = database_url[len(prefix) :].split("?", 1)[0]
        if path and path != ":memory:":
            return Path(path).parent / f"{Path(path).name}.keys"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fedldp" / "keys"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KeyStore:
    """Per-study keys, one file each (mode 0600) in ``directory`` (created 0700)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, study_id: str) -> Path:
        if not _STUDY_ID.fullmatch(study_id):
            raise ValueError(f"not a study id: {study_id!r}")
        return self.directory / f"{study_id}{_SUFFIX}"

    def create(self, study_id: str) -> None:
        """Write a fresh key for the study, atomically and durably."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self._path(study_id)
        fd, name = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=_SUFFIX)
        try:
            os.write(fd, secrets.token_bytes(_KEY_BYTES))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(name)
            raise
        os.close(fd)
        os.replace(name, target)
        _fsync_dir(self.directory)

    def _key(self, study_id: str) -> bytes:
        try:
            key = self._path(study_id).read_bytes()
        except FileNotFoundError:
            raise KeyMissing(
                f"no key for study {study_id} in {self.directory}: this server's key_dir "
                "(FEDLDP_KEY_DIR) is not the directory the study was created with (give every "
                "replica that directory), or the study ended and its key was destroyed"
            ) from None
        if len(key) != _KEY_BYTES:
            raise KeyMissing(f"the key file of study {study_id} is damaged")
        return key

    def has(self, study_id: str) -> bool:
        return self._path(study_id).exists()

    def studies(self) -> list[str]:
        """The studies that have a key (unfinished temporary files are not keys)."""
        if not self.directory.is_dir():
            return []
        names = (p.name.removesuffix(_SUFFIX) for p in self.directory.glob(f"*{_SUFFIX}"))
        return sorted(n for n in names if _STUDY_ID.fullmatch(n))

    def destroy(self, study_id: str) -> bool:
        """Overwrite the key with zeros, flush, unlink, flush the directory: True if a key was
        there. (On a copy-on-write or wear-levelled disk the overwrite is best effort; the unlink
        and the database's own deletion are not affected.)"""
        path = self._path(study_id)
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            return False
        try:
            os.write(fd, bytes(_KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):  # another replica destroyed it meanwhile
            os.unlink(path)
        _fsync_dir(self.directory)
        return True

    def encrypt(self, study_id: str, index: int, pids: list[int], rows: list[bytes]) -> list[bytes]:
        """Each row as stored: nonce || ciphertext, bound to (study, round, participant)."""
        aead = AESGCM(self._key(study_id))
        out = []
        for pid, row in zip(pids, rows, strict=True):
            nonce = secrets.token_bytes(_NONCE_BYTES)
            out.append(nonce + aead.encrypt(nonce, row, _aad(study_id, index, pid)))
        return out

    def decrypt(
        self, study_id: str, index: int, pids: list[int], blobs: list[bytes]
    ) -> list[bytes]:
        """The rows ``encrypt`` stored; ValueError if one was altered or moved."""
        aead = AESGCM(self._key(study_id))
        out = []
        for pid, blob in zip(pids, blobs, strict=True):
            try:
                plain = aead.decrypt(
                    blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], _aad(study_id, index, pid)
                )
            except InvalidTag:
                raise ValueError(
                    f"participant {pid}'s stored contribution to round {index} does not "
                    "authenticate under the study's key"
                ) from None
            out.append(plain)
        return out

    def digest_key(self, study_id: str) -> bytes:
        """A key for the receipts' digests, derived from the study's key: a plain hash of a
        contribution would let anyone holding an old copy of the database test a guess."""
        return hmac.new(self._key(study_id), b"fedldp receipt digests", hashlib.sha256).digest()


def _aad(study_id: str, index: int, pid: int) -> bytes:
    return f"{study_id}/{index}/{pid}".encode()
