"""Bootstrap of Flink SQL operator state from a DataFrame: keys are RowData (placed in key groups by
the BinaryRowData hash), values are RowData of the accumulators; fstate reads back what it wrote."""

from __future__ import annotations

import pytest

from fstate.readers import tables
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types.hashing import operator_id_for_uid
from fstate.writers.spec import parse_type
from fstate.writers.writer import SavepointWriter

pytestmark = pytest.mark.spark

KEY = "SQL ROW<k STRING>"
ACC = "SQL ROW<cnt BIGINT, s BIGINT, mx BIGINT, cd BIGINT, dv RAW('org.apache.flink.table.api.dataview.MapView')>"


def test_group_aggregate_state_by_uid_and_by_uid_hash(spark, tmp_path):
    rows = [((f"k{i}",), (10 + i, 100 * i, i - 3, i % 4, b"\x00")) for i in range(40)]
    schema = "key struct<k: string>, accState struct<cnt: bigint, s: bigint, mx: bigint, cd: bigint, dv: binary>"
    df = spark.createDataFrame(rows, schema)
    out = str(tmp_path / "sp")
    (SavepointWriter(128, spark)
     .with_keyed_state("4_group-aggregate", df, key_type=KEY, states={"accState": ACC}, parallelism=2)
     .with_keyed_state(None, df, key_type=KEY, states={"accState": ACC}, parallelism=3,
                       uid_hash=operator_id_for_uid("other").hex())
     .write(out))
    sp = Savepoint.open(out)
    for target, parallelism in (("4_group-aggregate", 2), (operator_id_for_uid("other").hex(), 3)):
        op = sp.operator(target)
        assert op.parallelism == parallelism
        meta = op.keyed_meta
        assert meta.key_type == parse_type(KEY)
        (state,) = meta.states
        assert (state.name, state.kind, state.value_type) == ("accState", "VALUE", parse_type(ACC))
        read = {r[0]: r[1] for r in tables.keyed_table(op, ["accState"], flatten_key=False).rows()}
        assert read == {key: acc for key, acc in rows}



def test_sql_type_spec_errors(spark, tmp_path):
    from fstate.savepoint.errors import InvalidArgumentError

    df = spark.createDataFrame([(("a",), 1)], "key struct<k: string>, v bigint")
    with pytest.raises(InvalidArgumentError, match="SQL type"):
        SavepointWriter(128, spark).with_keyed_state("op", df, key_type="SQL ROW<k STRIN>", states={"v": "SQL BIGINT"})
