#!/usr/bin/env python3
"""ClickHouse (chdb) as the oracle of the analytics and APM tests (tests/analytics_oracle.rs,
tests/long_ranges.rs).

Usage: tests/chdb_oracle.py ROWS.ndjson QUERIES.json [TABLE.json]
  ROWS.ndjson:  one JSON object per line, one key per column of the table.
  QUERIES.json: {"name": "SQL over the table", ...}
  TABLE.json:   {"name", "columns": [[name, ClickHouse type], ...], "order": "(key, ...)"};
                by default `events (distinct_id String, event String, ts UInt64)` (ts in unix
                milliseconds) ordered by (distinct_id, ts).
Prints {"name": [[row values...], ...], ...} on stdout.

Exits 3 with a message when chdb is missing: scripts/test.sh installs it (pip install chdb).
"""
import json
import shutil
import sys
import tempfile

try:
    from chdb import session
except ImportError:
    sys.stderr.write(
        "chdb (ClickHouse in Python) is not installed for this python: run scripts/test.sh, "
        "or pip install chdb, or point SEXTANT_PYTHON at a python that has it\n"
    )
    sys.exit(3)

rows, queries = sys.argv[1], sys.argv[2]
# The natural ClickHouse layout for per-user analytics: sorted by user and time.
table = {
    "name": "events",
    "columns": [["distinct_id", "String"], ["event", "String"], ["ts", "UInt64"]],
    "order": "(distinct_id, ts)",
}
if len(sys.argv) > 3:
    table = json.load(open(sys.argv[3]))
work = tempfile.mkdtemp(prefix="sextant-oracle-")
try:
    s = session.Session(work)
    columns = ", ".join(f"{n} {t}" for n, t in table["columns"])
    names = ", ".join(n for n, _ in table["columns"])
    s.query(f"CREATE TABLE {table['name']} ({columns}) ENGINE = MergeTree ORDER BY {table['order']}")
    s.query(f"INSERT INTO {table['name']} SELECT {names} FROM file('{rows}', 'JSONEachRow')")
    out = {}
    for name, sql in json.load(open(queries)).items():
        text = str(s.query(sql, "JSONCompact")).strip()
        out[name] = json.loads(text)["data"] if text else []
    json.dump(out, sys.stdout)
finally:
    shutil.rmtree(work, ignore_errors=True)
