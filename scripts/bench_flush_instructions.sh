#!/usr/bin/env bash
# Instructions per object spent in a shard's apply and flush paths, counted by callgrind: the
# same total for the same binary and data whatever else the machine does (ingest throughput on
# this shared 2-core machine moves by ±10% from run to run, more than most single changes).
# Runs `sextant bench-storage` on a small data set (one segment) under valgrind and prints the
# inclusive instruction counts of the functions named below, per object.
#   scripts/bench_flush_instructions.sh [BIN ...]   (default: target/release/sextant)
# HANDOFF=1: the rows go to the shard with the payload, as from `sextant dev`'s router.
# Needs valgrind (apt-get install valgrind). Takes about a minute per binary.
set -euo pipefail
cd "$(dirname "$0")/.."
OBJECTS=${OBJECTS:-20000}
KIND=${KIND:-spans}
[ $# -gt 0 ] || set -- target/release/sextant
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for bin in "$@"; do
  out=$WORK/callgrind.out
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" bench-storage --kind "$KIND" \
    --objects "$OBJECTS" --dir "$WORK/shard" --lookups 10 ${HANDOFF:+--handoff} >/dev/null 2>"$WORK/valgrind.log"
  callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | python3 -c "
import re, sys
# A function is also listed under the source files of code inlined into it, with a part of its
# cost; the entry of its own file, the largest, covers all of it.
want = {'encode the sub-batch (router)': 'persist_row::encode_ingest', 'encode, rows kept (router)': 'persist_row::encode_ingest_decoded', 'apply (decode + buffer)': 'GroupStore>::apply', 'flush (write_segment)': 'shard::write_segment',
        'attribute columns: Split::push': 'attribute_columns::Split::push', 'attribute columns: choose': 'attribute_columns::choose',
        'rows to Arrow (to_segment_batch)': 'table::to_segment_batch', 'parquet ArrowWriter::write': 'ArrowWriter<W>::write',
        'zstd compress': 'ZSTD_compress2'}
got = {}
for line in sys.stdin:
    m = re.match(r'\s*([\d,]+) \(\s*[\d.]+%\)\s+\S+?:(.*?)( \[.*\])?$', line)
    if not m:
        continue
    for name, sym in want.items():
        if m.group(2).endswith(sym):
            got[name] = max(got.get(name, 0), int(m.group(1).replace(',', '')))
print('$bin', '($KIND, $OBJECTS objects)')
for name in want:
    print(f'  {name:34} {got.get(name, 0) / $OBJECTS:10.0f} instructions/object')
"
  rm -rf "$WORK/shard"
done
