"""`fstate read --ttl-timestamps` (data source option ttlTimestamps): a TTL state's values, list elements
and map values as {value, ttl_timestamp}, the last access Flink's TTL expires them by; without it the
bare values, as before."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import tables
from fstate.savepoint import ttl_meta
from fstate.savepoint.loader import Savepoint
from tests.savepoint.test_fuzz import SAMPLES

TTL_SAMPLE = SAMPLES["sql-no-uids-ttl-savepoint"]


def _stored(view) -> dict:
    """{(state, key): [(value, last access)]} straight from the decoded stream with TTL values kept."""
    out: dict = {}
    for source in view.keyed_states():
        with source.open(meta_of=ttl_meta.with_timestamped_states) as state:
            for sid, _, _, key, _, value in state.entries():
                out.setdefault((state.meta.states[sid].name, key), []).append(value)
    return out


def test_every_ttl_state_shows_its_values_with_their_last_access():
    sp = Savepoint.open(str(TTL_SAMPLE))
    checked = 0
    for view in sp.operators:
        if not view.has_keyed_state:
            continue
        kinds = {s.name: s.kind for s in view.keyed_meta.states if ttl_meta.is_ttl_meta(s)}
        ttl_states = list(kinds)
        if not ttl_states:
            continue
        plain = tables.keyed_table(view, ttl_states)
        stamped = tables.keyed_table(view, ttl_states, ttl_timestamps=True)
        width = len(plain.columns) - len(ttl_states)
        assert plain.column_names == stamped.column_names
        plain_rows = {row[:width]: row[width:] for row in plain.rows()}
        stamped_rows = {row[:width]: row[width:] for row in stamped.rows()}
        assert plain_rows.keys() == stamped_rows.keys() and plain_rows
        for key, values in stamped_rows.items():
            for name, bare, kept in zip(ttl_states, plain_rows[key], values):
                kind = kinds[name]
                if kept is None:
                    assert bare is None
                elif kind == "MAP":
                    assert {k: v.user_value for k, v in kept.items()} == bare
                    assert all(v.last_access_timestamp > 1_600_000_000_000 for v in kept.values())
                elif kind == "LIST":
                    assert [v.user_value for v in kept] == bare
                else:
                    assert kept.user_value == bare and kept.last_access_timestamp > 1_600_000_000_000
                checked += 1
    assert checked > 10


def test_read_shows_the_ttl_timestamp_column_only_when_asked():
    runner = CliRunner()
    uid = next(op.uid_hash for op in Savepoint.open(str(TTL_SAMPLE)).operators
               if op.has_keyed_state and any(s.name == "deduplicate-state" for s in op.keyed_meta.states))
    plain = runner.invoke(app, ["read", str(TTL_SAMPLE), "--uid", uid, "--json"])
    stamped = runner.invoke(app, ["read", str(TTL_SAMPLE), "--uid", uid, "--json", "--ttl-timestamps"])
    assert plain.exit_code == 0 and stamped.exit_code == 0, (plain.output, stamped.output)
    plain_rows = [json.loads(line) for line in plain.stdout.splitlines()]
    stamped_rows = [json.loads(line) for line in stamped.stdout.splitlines()]
    stored = _stored(Savepoint.open(str(TTL_SAMPLE)).operator(uid))
    assert len(plain_rows) == len(stamped_rows) > 0
    for bare, row in zip(plain_rows, stamped_rows):
        value = row["deduplicate-state"]
        assert set(value) == {"value", "ttl_timestamp"} and value["value"] == bare["deduplicate-state"]
        (kept,) = stored[("deduplicate-state", (row["key_f0"],))]
        assert value["ttl_timestamp"] == kept.last_access_timestamp
