"""Encryption and decryption parameters (format/FORMAT.md §9.5), backed by ``tensorizer._C``.

``EncryptionParams`` is handed to a ``TensorSerializer`` and ``DecryptionParams`` to a
``TensorDeserializer``. The key material itself lives in the native module's libsodium guarded
memory (``_C.Encryption`` / ``_C.Decryption``) and is zeroed when those objects die; no Python copy
of a decryption key or passphrase is kept here.

Validation rules and exception types follow tensorizer 2.11.1:

* ``EncryptionParams(key)``: ``TypeError`` unless ``bytes``/``bytearray``/``memoryview``;
  ``ValueError`` unless exactly 32 bytes.
* ``EncryptionParams.from_string``: ``ValueError`` for an empty source; ``TypeError`` for a
  ``MemLimit`` passed as ``opslimit`` (or an ``OpsLimit`` as ``memlimit``) or another type;
  ``None`` means ``MODERATE``; ``salt=None`` is 16 random bytes, otherwise a bytes-like object of
  exactly 16 bytes (``TypeError`` for ``str``, ``ValueError`` for another length).
* ``EncryptionParams.salt``: ``ValueError`` for exact or random keys.
* ``DecryptionParams.from_key``: ``ValueError`` for an empty key or one that is not 32 bytes.
* ``DecryptionParams.from_string``: ``ValueError`` for an empty source, ``TypeError`` for anything
  but ``str`` or bytes-like.

Differences from tensorizer (on purpose): ``repr()`` never shows key material, and
``DecryptionParams`` does not keep the key or passphrase as plain Python ``bytes`` attributes.
"""

from enum import IntEnum
from typing import Optional, Union

from . import _C

__all__ = ["CryptographyError", "EncryptionParams", "DecryptionParams"]

# 2.11.1's flag for "libsodium was found, encryption works". libsodium is linked into the native
# module, so wherever this module imports (it needs _C), encryption is available.
available: bool = True

_KEY_BYTES = 32
_SALT_BYTES = 16
_BytesLike = (bytes, bytearray, memoryview)


class CryptographyError(Exception):
    """Base class of ``tensorizer.CryptographyError`` (tensorizer's internal one)."""


def _as_bytes(value) -> bytes:
    return value.tobytes() if isinstance(value, memoryview) else bytes(value)


class EncryptionParams:
    """Encryption parameters for a ``TensorSerializer``.

    Three ways to make one:

    * ``EncryptionParams.random()``: a random 32-byte key; save ``.key`` to decrypt later with
      ``DecryptionParams.from_key``.
    * ``EncryptionParams.from_string(passphrase)``: an Argon2id key; its parameters and salt are
      stored in every encrypted header, so ``DecryptionParams.from_string(passphrase)`` suffices
      to decrypt.
    * ``EncryptionParams(key)``: an exact 32-byte key you derived yourself.
    """

    __slots__ = ("_native",)

    class OpsLimit(IntEnum):
        """libsodium ``crypto_pwhash`` opslimit presets (Argon2id)."""

        MIN = 1
        INTERACTIVE = 2
        MODERATE = 3
        SENSITIVE = 4

    class MemLimit(IntEnum):
        """libsodium ``crypto_pwhash`` memlimit presets in bytes (Argon2id)."""

        MIN = 8192
        INTERACTIVE = 67108864
        MODERATE = 268435456
        SENSITIVE = 1073741824

    def __init__(self, key: Union[bytes, bytearray, memoryview]):
        if not isinstance(key, _BytesLike):
            raise TypeError(
                "Encryption key must be a cryptographically secure bytestring."
                " To derive an encryption key from an arbitrary string,"
                " use EncryptionParams.from_string()"
            )
        key = _as_bytes(key)
        if len(key) != _KEY_BYTES:
            raise ValueError(
                f"Invalid encryption key length, should be {_KEY_BYTES} bytes;"
                f" got {len(key)} bytes instead."
                " To generate a valid encryption key from any string or bytes object,"
                " use EncryptionParams.from_string()"
            )
        self._native = _C.Encryption.from_key(key)

    @classmethod
    def _wrap(cls, native) -> "EncryptionParams":
        obj = cls.__new__(cls)
        obj._native = native
        return obj

    @classmethod
    def random(cls) -> "EncryptionParams":
        """A random 32-byte key with no source string. Save ``.key`` to decrypt later."""
        return cls._wrap(_C.Encryption.random())

    @classmethod
    def from_string(
        cls,
        source: Union[str, bytes],
        opslimit: Union["EncryptionParams.OpsLimit", int, None] = None,
        memlimit: Union["EncryptionParams.MemLimit", int, None] = None,
        salt: Union[bytes, bytearray, memoryview, None] = None,
        *,
        encoding: str = "utf-8",
    ) -> "EncryptionParams":
        """An Argon2id (RFC 9106) key derived from ``source``.

        ``opslimit`` / ``memlimit`` default to ``OpsLimit.MODERATE`` / ``MemLimit.MODERATE``
        (about 0.5 s and 256 MiB); ``OpsLimit.MIN`` / ``MemLimit.MIN`` are cheap.
        ``salt`` (16 bytes) defaults to a random one; it is stored in the file.
        """
        if not source:
            raise ValueError("Source cannot be empty")
        if isinstance(opslimit, cls.MemLimit) or isinstance(opslimit, bool) or not isinstance(
            opslimit, (cls.OpsLimit, int, type(None))
        ):
            raise TypeError(
                "opslimit parameter: expected EncryptionParams.OpsLimit,"
                f" int, or None; {opslimit.__class__.__name__} found"
            )
        if isinstance(memlimit, cls.OpsLimit) or isinstance(memlimit, bool) or not isinstance(
            memlimit, (cls.MemLimit, int, type(None))
        ):
            raise TypeError(
                "memlimit parameter: expected EncryptionParams.MemLimit,"
                f" int, or None; {memlimit.__class__.__name__} found"
            )
        if isinstance(source, str):
            source = source.encode(encoding)
        elif isinstance(source, _BytesLike):
            source = _as_bytes(source)
        else:
            raise TypeError(
                f"Invalid source type: must be str or bytes, got {source.__class__.__name__}"
            )
        if salt is not None:
            if not isinstance(salt, _BytesLike):
                raise TypeError(
                    "Invalid object type provided for salt: expected bytes,"
                    f" got {salt.__class__.__name__}"
                )
            salt = _as_bytes(salt)
            if len(salt) != _SALT_BYTES:
                raise ValueError(
                    f"Invalid salt length: should be {_SALT_BYTES} bytes, got {len(salt)}"
                )
        ops = int(cls.OpsLimit.MODERATE if opslimit is None else opslimit)
        mem = int(cls.MemLimit.MODERATE if memlimit is None else memlimit)
        if not 1 <= ops <= 0xFFFFFFFF:
            raise ValueError(f"opslimit out of range [1, 4294967295]: {ops}")
        if not 8192 <= mem <= 4398046510080:
            raise ValueError(f"memlimit out of range [8192, 4398046510080]: {mem}")
        return cls._wrap(_C.Encryption.from_passphrase(source, ops, mem, salt))

    @property
    def key(self) -> bytes:
        """The 32-byte key (the derived key for ``from_string``): pass it to
        ``DecryptionParams.from_key`` to decrypt without re-deriving."""
        return self._native.key

    @property
    def salt(self) -> bytes:
        """The 16-byte Argon2id salt of a ``from_string`` key (stored in the file).

        Raises ``ValueError`` for exact or random keys, which have none."""
        salt = self._native.salt
        if salt is None:
            raise ValueError(
                "An exact binary key is being used."
                " Exact binary keys do not use key derivation algorithms,"
                " and thus have no salt."
            )
        return salt

    @property
    def opslimit(self) -> Optional[int]:
        return self._native.opslimit

    @property
    def memlimit(self) -> Optional[int]:
        return self._native.memlimit

    def __repr__(self) -> str:
        kind = "exact key" if self._native.salt is None else "from_string"
        return f"<EncryptionParams ({kind})>"


class DecryptionParams:
    """Decryption parameters for a ``TensorDeserializer``.

    * ``DecryptionParams.from_key(key)``: the exact 32-byte key (``EncryptionParams.key``); opens
      any encrypted file, however it was keyed, and is always faster.
    * ``DecryptionParams.from_string(passphrase)``: for files written with
      ``EncryptionParams.from_string``; the Argon2id parameters and salt come from the file.
    """

    __slots__ = ("_native", "_kind")

    def __init__(self):
        # An empty object, as in tensorizer; a TensorDeserializer rejects it with ValueError.
        self._native = None
        self._kind = None

    @classmethod
    def from_key(cls, key: Union[bytes, bytearray, memoryview]) -> "DecryptionParams":
        if not isinstance(key, _BytesLike):
            if not key:
                raise ValueError("Key cannot be empty")
            raise TypeError(
                f"Decryption key must be bytes, got {key.__class__.__name__}"
            )
        key = _as_bytes(key)
        if not key:
            raise ValueError("Key cannot be empty")
        if len(key) != _KEY_BYTES:
            raise ValueError(
                f"Invalid decryption key length, should be {_KEY_BYTES} bytes;"
                f" got {len(key)} bytes instead."
                " DecryptionParams.from_key() should be used with a key"
                " read from EncryptionParams.key."
                " To decrypt with an arbitrary string instead of a binary key,"
                " use DecryptionParams.from_string() instead."
            )
        params = cls()
        params._native = _C.Decryption.from_key(key)
        params._kind = "key"
        return params

    @classmethod
    def from_string(
        cls, source: Union[str, bytes], *, encoding: str = "utf-8"
    ) -> "DecryptionParams":
        if not source:
            raise ValueError("Source cannot be empty")
        if isinstance(source, str):
            source = source.encode(encoding)
        elif isinstance(source, _BytesLike):
            source = _as_bytes(source)
        else:
            raise TypeError("Invalid source type: must be str or bytes")
        params = cls()
        params._native = _C.Decryption.from_passphrase(source)
        params._kind = "string"
        return params

    def __repr__(self) -> str:
        return f"<DecryptionParams ({self._kind or 'empty'})>"
