"""One exception hierarchy for everything that is wrong with the *input*.

Every error names the file (or savepoint) it is about and says what is wrong with it. The CLI turns
any :class:`FStateError` into a one-line message and exit code 2; any other exception is a bug.

An fstate error raised inside a Spark task or a Spark Python data source reaches the driver wrapped in
Spark's exception (``PythonException``, ``AnalysisException [PYTHON_DATA_SOURCE_ERROR]``) with the
worker's traceback as text. :func:`noted_for_driver` (in the worker) writes the error's class and
fields on one line of that text; :func:`from_spark` (on the driver) makes the fstate error again from
it, and :func:`spark_errors` raises it in place of Spark's exception.
"""

from __future__ import annotations

import json
import re
import struct
from contextlib import contextmanager
from typing import Iterator

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


class NotMetadataError(SavepointNotFoundError, CorruptStateError):
    """A file given as a savepoint's `_metadata` that is none: too short for one, or another magic number."""


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


class TransformError(InvalidArgumentError):
    """A transform function's result that cannot be written back to its state (not a batch or frame, a
    missing column, the key of another type, a type no state holds, results of different types)."""


class ModifyConflictError(InvalidArgumentError):
    """Operations of one modify that contradict each other (two operators end up with one uid, an
    operation names an operator an earlier one removed or renamed); raised before anything is written."""


class ConcurrentWriteError(FStateError):
    """Another fstate process is writing the same target (or one appeared while this one wrote)."""


class FStateWarning(UserWarning):
    """Something the user must know about a result fstate produced as asked, e.g. operators whose max
    parallelism disagrees or a state whose type a transform changed (Flink may refuse either); the
    CLI prints it as one warning line."""


# ---------------------------------------------------------------------------------------------
# fstate errors through Spark

#: the text before the JSON line that carries an fstate error from a Spark worker to the driver
_WORKER_NOTE = "fstate-error: "
_NOTED = re.compile(re.escape(_WORKER_NOTE) + r"(\{.*\})")
#: the traceback line of an fstate error (a worker without the note: Python 3.10, a task fstate did not wrap)
_TRACEBACK_LINE = re.compile(r"fstate\.savepoint\.errors\.(\w+): (.+)")


def noted_for_driver(error: FStateError) -> FStateError:
    """``error`` with a note (a line of its traceback text, which Spark hands the driver) giving its
    class, message and fields, for :func:`from_spark`."""
    fields = {name: value for name, value in vars(error).items()
              if isinstance(value, (str, int, float, bool)) or value is None}
    note = _WORKER_NOTE + json.dumps({"class": type(error).__name__, "message": str(error), "fields": fields})
    if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
        error.add_note(note)
    return error


@contextmanager
def carried_to_driver() -> Iterator[None]:
    """In a Spark worker (a data source's methods, a task): fstate errors leave noted for the driver."""
    try:
        yield
    except FStateError as error:
        raise noted_for_driver(error)


def _error_class(name: str) -> type[FStateError] | None:
    found = globals().get(name)
    return found if isinstance(found, type) and issubclass(found, FStateError) else None


def from_spark(exc: BaseException) -> FStateError | None:
    """The fstate error a Spark exception carries (raised in a worker, found in the exception's text:
    the last one, the one the worker raised), made again with its class and message; None when it
    carries none."""
    if isinstance(exc, FStateError):
        return exc
    text = str(exc)
    noted = _NOTED.findall(text)
    if noted:
        data = json.loads(noted[-1])
        error_class, message, fields = _error_class(data["class"]), data["message"], data["fields"]
    else:
        found = _TRACEBACK_LINE.findall(text)
        if not found:
            return None
        error_class, message, fields = _error_class(found[-1][0]), found[-1][1].strip(), {"detail": found[-1][1].strip()}
    error = (error_class or FStateError).__new__(error_class or FStateError)
    Exception.__init__(error, message)
    error.path = None
    error.__dict__.update(fields)
    return error


@contextmanager
def spark_errors() -> Iterator[None]:
    """Spark's exceptions that carry an fstate error (``PYTHON_DATA_SOURCE_ERROR``, a failed task) raised
    as that error (its class, its one-line message); the Spark exception stays its ``__context__``::

        with fstate.spark_errors():
            frame.collect()
    """
    try:
        yield
    except FStateError:
        raise
    except Exception as exc:
        error = from_spark(exc)
        if error is None:
            raise
        raise error from None
