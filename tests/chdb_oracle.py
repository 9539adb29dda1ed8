#!/usr/bin/env python3
"""ClickHouse (chdb) as the oracle of the analytics tests (tests/analytics_oracle.rs).

Usage: tests/chdb_oracle.py EVENTS.ndjson QUERIES.json
  EVENTS.ndjson: one {"distinct_id", "event", "ts"} per line, ts in unix milliseconds.
  QUERIES.json:  {"name": "SQL over the table `events`", ...}
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

events, queries = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp(prefix="sextant-oracle-")
try:
    s = session.Session(work)
    # The natural ClickHouse layout for per-user analytics: sorted by user and time.
    s.query(
        "CREATE TABLE events (distinct_id String, event String, ts UInt64) "
        "ENGINE = MergeTree ORDER BY (distinct_id, ts)"
    )
    s.query(f"INSERT INTO events SELECT distinct_id, event, ts FROM file('{events}', 'JSONEachRow')")
    out = {}
    for name, sql in json.load(open(queries)).items():
        text = str(s.query(sql, "JSONCompact")).strip()
        out[name] = json.loads(text)["data"] if text else []
    json.dump(out, sys.stdout)
finally:
    shutil.rmtree(work, ignore_errors=True)
