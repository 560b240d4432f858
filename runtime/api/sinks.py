"""Sinks: a two-phase-commit base (exactly-once output end to end), a transactional file sink on
top of it, and simple collecting / discarding sinks for tests and benchmarks."""

from __future__ import annotations

import errno
import itertools
import os
import threading
import uuid
from typing import Any, Callable

from ...savepoint import types as savepoint_types
from .functions import CheckpointedFunction, CheckpointListener, SinkFunction
from ..state.keyed_backend import ListStateDescriptor
from .typeinfo import Types
from ..exceptions import TransactionConflictError


class TwoPhaseCommitSinkFunction(SinkFunction, CheckpointedFunction, CheckpointListener):
    """Flink's two-phase commit protocol for sinks.

    Output goes into a *transaction*. At a checkpoint the current transaction is pre-committed
    (made durable, not yet visible) and a new one begins; when the checkpoint completes, every
    pre-committed transaction up to it is committed (made visible). The pending transactions are
    operator list state ``state`` (``Tuple2<Long, TXN>``: checkpoint id, transaction; id -1 marks
    the transaction that was open), so after a failure the restored job commits what a completed
    checkpoint covered and aborts what it did not. ``commit`` must be idempotent.

    Subclasses implement ``begin_transaction``, ``write``, ``pre_commit``, ``commit`` and ``abort``.
    """

    STATE = "state"

    def __init__(self, transaction_type: savepoint_types.TypeInfo = Types.PICKLED):
        self.transaction_type = transaction_type
        self._txn: Any = None
        self._pending: dict[int, Any] = {}
        self._state = None
        self._finished = False

    # -- to implement -----------------------------------------------------------------------------
    def begin_transaction(self) -> Any:
        raise NotImplementedError

    def write(self, transaction: Any, value: Any, context) -> None:
        raise NotImplementedError

    def pre_commit(self, transaction: Any) -> None:
        raise NotImplementedError

    def commit(self, transaction: Any) -> None:
        raise NotImplementedError

    def abort(self, transaction: Any) -> None:
        raise NotImplementedError

    def recover_and_commit(self, transaction: Any) -> None:
        self.commit(transaction)

    def recover_and_abort(self, transaction: Any) -> None:
        self.abort(transaction)

    # -- protocol -------------------------------------------------------------------------------
    def initialize_state(self, context) -> None:
        self._state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor(self.STATE, Types.TUPLE(Types.LONG, self.transaction_type)))
        for cid, txn in self._state.get():
            if cid >= 0:
                self.recover_and_commit(txn)
            else:
                self.recover_and_abort(txn)
        self._state.clear()
        self._pending = {}
        self._txn = self.begin_transaction()

    def invoke(self, value: Any, context) -> None:
        self.write(self._txn, value, context)

    def snapshot_state(self, context) -> None:
        cid = context.get_checkpoint_id()
        self.pre_commit(self._txn)
        self._pending[cid] = self._txn
        self._txn = self.begin_transaction()
        self._state.update([(c, t) for c, t in self._pending.items()] + [(-1, self._txn)])

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for cid in sorted(self._pending):
            if cid <= checkpoint_id:
                self.commit(self._pending.pop(cid))

    def finish(self) -> None:
        self._finished = True
        if not self.get_runtime_context().is_checkpointing_enabled():
            # no checkpoint will come: the end of input commits directly
            self.pre_commit(self._txn)
            self.commit(self._txn)
            self._txn = self.begin_transaction()

    def close(self) -> None:
        if self._txn is not None:
            try:
                self.abort(self._txn)
            finally:
                self._txn = None


class TwoPhaseCommitFileSink(TwoPhaseCommitSinkFunction):
    """Lines into ``directory``: a transaction is a hidden file ``.inprogress/<txn>``, committed by
    an atomic hard link to ``part-<txn>`` (then the hidden name is removed). Readers of the output
    only look at ``part-*`` files (:func:`read_committed`).

    Transaction names are ``<job id prefix>-a<attempt>-s<subtask>-<random>-<n>``: the random part,
    new for every sink instance, keeps them unique over runs of one job id into one directory
    (restored or started fresh, attempt numbers start at 0 again). A commit never replaces a
    ``part-`` file: finding one that is not its own transaction is a TransactionConflictError."""

    def __init__(self, directory: str, formatter: Callable[[Any], str] = str, encoding: str = "utf-8"):
        super().__init__(Types.STRING)
        self.directory = os.path.abspath(directory)
        self.formatter = formatter
        self.encoding = encoding
        self._fh = None
        self._fh_txn = None
        self._names = None

    def open(self, runtime_context) -> None:
        os.makedirs(os.path.join(self.directory, ".inprogress"), exist_ok=True)

    def _tmp(self, txn: str) -> str:
        return os.path.join(self.directory, ".inprogress", txn)

    def _final(self, txn: str) -> str:
        return os.path.join(self.directory, f"part-{txn}")

    def begin_transaction(self) -> str:
        if self._names is None:
            rc = self.get_runtime_context()
            prefix = (f"{rc.get_job_id()[:8]}-a{rc.get_attempt_number()}-s{rc.get_index_of_this_subtask()}"
                      f"-{uuid.uuid4().hex[:12]}")
            self._names = (f"{prefix}-{n:06d}" for n in itertools.count())
        os.makedirs(os.path.join(self.directory, ".inprogress"), exist_ok=True)
        return next(self._names)

    def write(self, txn: str, value: Any, context) -> None:
        if self._fh_txn != txn:
            self._close_file()
            self._fh = open(self._tmp(txn), "a", encoding=self.encoding)
            self._fh_txn = txn
        self._fh.write(self.formatter(value))
        self._fh.write("\n")

    def _close_file(self, sync: bool = False) -> None:
        if self._fh is not None:
            if sync:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
            self._fh_txn = None

    def pre_commit(self, txn: str) -> None:
        if self._fh_txn == txn:
            self._close_file(sync=True)

    def commit(self, txn: str) -> None:
        tmp, final = self._tmp(txn), self._final(txn)
        try:
            os.link(tmp, final)
        except FileNotFoundError:
            return  # empty, or committed before a failure (commit is idempotent)
        except FileExistsError:
            if not os.path.samefile(tmp, final):
                raise TransactionConflictError(
                    f"cannot commit transaction {txn}: {final} already holds other committed output "
                    "(a commit never replaces a part file)") from None
            # linked before a crash: finish by removing the hidden name
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            self._commit_without_links(tmp, final, txn)
            return
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass

    def _commit_without_links(self, tmp: str, final: str, txn: str) -> None:
        """A file system without hard links: rename, after checking the name is free."""
        if os.path.lexists(final):
            raise TransactionConflictError(
                f"cannot commit transaction {txn}: {final} already exists (a commit never replaces a part file)")
        os.rename(tmp, final)

    def abort(self, txn: str) -> None:
        if self._fh_txn == txn:
            self._close_file()
        try:
            os.remove(self._tmp(txn))
        except FileNotFoundError:
            pass


def read_committed(directory: str, encoding: str = "utf-8") -> list[str]:
    """All lines the file sink committed to ``directory`` (files in name order)."""
    out: list[str] = []
    if not os.path.isdir(directory):
        return out
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), encoding=encoding) as f:
                out.extend(line.rstrip("\n") for line in f)
    return out


_COLLECTED: dict[str, list] = {}
_COLLECT_LOCK = threading.Lock()


class CollectSink(SinkFunction):
    """Appends every value to an in-process list named ``name`` (``CollectSink.results(name)``).
    Not transactional: after a failover it sees replayed values again."""

    def __init__(self, name: str):
        self.name = name
        with _COLLECT_LOCK:
            _COLLECTED.setdefault(name, [])

    def invoke(self, value: Any, context) -> None:
        with _COLLECT_LOCK:
            _COLLECTED[self.name].append(value)

    @staticmethod
    def results(name: str) -> list:
        with _COLLECT_LOCK:
            return list(_COLLECTED.get(name, []))

    @staticmethod
    def clear(name: str) -> None:
        with _COLLECT_LOCK:
            _COLLECTED[name] = []


class DiscardingSink(SinkFunction):
    def invoke(self, value: Any, context) -> None:
        pass
