#!/usr/bin/env python3
"""Stores the rows `sextant bench-storage --ndjson FILE` wrote into ClickHouse (chdb, a
MergeTree table with ZSTD) and DuckDB, and prints their bytes on disk per object, so
docs/BENCHMARKS.md can compare the same rows in the same run.

Usage: scripts/bench_storage_peers.py spans|logs FILE.ndjson SEXTANT_BYTES_PER_OBJECT
Needs: pip install chdb duckdb
"""
import json
import os
import shutil
import sys
import tempfile

# Set from the command line by main(); scripts/bench_reads.py imports SCHEMAS and ORDER.
KIND, NDJSON, OURS = None, None, 0.0

# The same columns Sextant stores; attributes as a Map like OpenTelemetry exporters for
# ClickHouse do (otel_traces / otel_logs tables), sorted like Sextant's segments.
SCHEMAS = {
    "spans": """
        trace_id String CODEC(ZSTD(3)), span_id String CODEC(ZSTD(3)),
        parent_span_id String CODEC(ZSTD(3)), service_name LowCardinality(String) CODEC(ZSTD(3)),
        operation LowCardinality(String) CODEC(ZSTD(3)), ts DateTime64(9) CODEC(Delta, ZSTD(3)),
        duration_ns UInt64 CODEC(ZSTD(3)), status LowCardinality(String) CODEC(ZSTD(3)),
        attributes Map(LowCardinality(String), String) CODEC(ZSTD(3))
    """,
    "logs": """
        ts DateTime64(9) CODEC(Delta, ZSTD(3)), level LowCardinality(String) CODEC(ZSTD(3)),
        service LowCardinality(String) CODEC(ZSTD(3)), message String CODEC(ZSTD(3)),
        trace_id String CODEC(ZSTD(3)), span_id String CODEC(ZSTD(3)),
        attributes Map(LowCardinality(String), String) CODEC(ZSTD(3))
    """,
}
ORDER = {"spans": "(service_name, trace_id, ts)", "logs": "(service, ts)"}


def rows():
    with open(NDJSON) as f:
        for line in f:
            o = json.loads(line)
            attrs = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in (o.get("attributes") or {}).items()}
            if KIND == "spans":
                yield {
                    "trace_id": o["trace_id"], "span_id": o["span_id"],
                    "parent_span_id": o.get("parent_span_id") or "", "service_name": o["service_name"],
                    "operation": o["operation"], "ts": o["timestamp"],
                    "duration_ns": int(o["duration_ms"] * 1e6), "status": o.get("status") or "unset",
                    "attributes": attrs,
                }
            else:
                yield {
                    "ts": o["timestamp"], "level": o["level"].upper(), "service": o["service"],
                    "message": o["message"], "trace_id": o.get("trace_id") or "",
                    "span_id": o.get("span_id") or "", "attributes": attrs,
                }


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def main():
    global KIND, NDJSON, OURS
    KIND, NDJSON, OURS = sys.argv[1], sys.argv[2], float(sys.argv[3])
    work = tempfile.mkdtemp(prefix="sextant-peers-")
    flat = os.path.join(work, "rows.ndjson")
    n = 0
    with open(flat, "w") as out:
        for r in rows():
            out.write(json.dumps(r) + "\n")
            n += 1
    report = {"kind": KIND, "objects": n, "sextant_bytes_per_object": OURS}

    from chdb import session
    s = session.Session(os.path.join(work, "ch"))
    s.query("CREATE DATABASE IF NOT EXISTS b")
    s.query(f"CREATE TABLE b.t ({SCHEMAS[KIND]}) ENGINE = MergeTree ORDER BY {ORDER[KIND]}")
    s.query(f"INSERT INTO b.t SELECT * FROM file('{flat}', 'JSONEachRow')")
    s.query("OPTIMIZE TABLE b.t FINAL")
    ch = float(str(s.query(
        "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'b' AND table = 't' AND active", "CSV"
    )).strip())
    report["clickhouse_bytes_per_object"] = ch / n
    report["sextant_to_clickhouse"] = OURS / (ch / n)
    s.close()

    import duckdb
    db_path = os.path.join(work, "duck.db")
    con = duckdb.connect(db_path)
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_json_auto('{flat}')")
    con.execute("CHECKPOINT")
    con.close()
    report["duckdb_bytes_per_object"] = os.path.getsize(db_path) / n
    report["sextant_to_duckdb"] = OURS / (os.path.getsize(db_path) / n)
    print(json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
