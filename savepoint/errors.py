"""One exception hierarchy for everything that is wrong with the *input*.

Every error names the file (or savepoint) it is about and says what is wrong with it. The CLI turns
any :class:`FStateError` into a one-line message and exit code 2; any other exception is a bug.
"""

from __future__ import annotations

import struct

#: What Python raises when state bytes are not what their serializer says: decoders turn these into
#: CorruptStateError naming the key group and the file.
DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError, TypeError)
#: what an encoder raises for a value its type cannot hold
ENCODE_ERRORS = (struct.error, TypeError, ValueError, OverflowError, AttributeError, IndexError, KeyError,
                 UnicodeEncodeError)


class FStateError(Exception):
    """Base class: bad input, reported to the user without a traceback."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        self.detail = message
        super().__init__(f"{path}: {message}" if path else message)


class SavepointNotFoundError(FStateError):
    """The path holds no savepoint or checkpoint (no `_metadata`)."""


class CorruptStateError(FStateError):
    """Bytes that do not follow Flink's layout: truncated, bad magic, impossible lengths."""


class UnsupportedVersionError(CorruptStateError):
    """A version number (metadata, proxy, snapshot) that fstate does not know."""


class MissingStateFileError(FStateError):
    """A state handle points at a file that does not exist (or has the wrong size)."""


class UnknownOperatorError(FStateError):
    """No operator with the given uid or uid hash in the savepoint."""


class UnknownStateError(FStateError):
    """The operator has no state with the given name (or not of the requested kind)."""


class UnsupportedSerializerError(FStateError):
    """A serializer snapshot class whose values fstate cannot decode or encode."""


class UnresolvedSnapshotError(UnsupportedSerializerError, CorruptStateError):
    """A backend header with a serializer snapshot fstate cannot parse, whose end could not be
    determined (see savepoint.header_search): the states of that one header are not known. A
    CorruptStateError too, so that a reader that read only a prefix of the stream reads more and retries."""


class ExternalPathError(FStateError):
    """A handle points outside the savepoint directory and the user did not allow that."""


class StorageError(FStateError):
    """A remote file system refused or failed: no credentials, access denied, a missing bucket,
    throttling or an unreachable endpoint that persisted through the retries (``transient``)."""

    def __init__(self, message: str, path: str | None = None, *, transient: bool = False):
        super().__init__(message, path)
        self.transient = transient


class InvalidArgumentError(FStateError):
    """A user argument that cannot work (bad option value, bad spec)."""


class SqlError(InvalidArgumentError):
    """A query that cannot run (it does not parse, names an unknown view or column, ...), on either
    engine: the engine's first line about it and the views the query could use."""

    def __init__(self, problem: str, views):
        names = ", ".join(sorted(views)) or "none"
        super().__init__(f"SQL: {problem} (views: {names})")
        self.problem = problem


class ModifyConflictError(InvalidArgumentError):
    """Operations of one modify that contradict each other (two operators end up with one uid, an
    operation names an operator an earlier one removed or renamed); raised before anything is written."""


class ConcurrentWriteError(FStateError):
    """Another fstate process is writing the same target (or one appeared while this one wrote)."""


class FStateWarning(UserWarning):
    """Something the user must know about a result fstate produced as asked, e.g. operators whose max
    parallelism disagrees or a state whose type a transform changed (Flink may refuse either); the
    CLI prints it as one warning line."""
