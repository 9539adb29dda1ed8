#!/usr/bin/env bash
# Instructions per object spent in a shard's apply and flush paths, counted by callgrind: the
# same total for the same binary and data whatever else the machine does (ingest throughput on
# this shared 2-core machine moves by ±10% from run to run, more than most single changes).
# Runs `sextant bench-storage` on a small data set (one segment) under valgrind and prints the
# inclusive instruction counts of the functions named below, per object.
#   scripts/bench_flush_instructions.sh [BIN ...]   (default: target/release/sextant)
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
    --objects "$OBJECTS" --dir "$WORK/shard" --lookups 10 >/dev/null 2>"$WORK/valgrind.log"
  callgrind_annotate --inclusive=yes "$out" 2>/dev/null | python3 -c "
import re, sys
want = {'apply (decode + buffer)': 'GroupStore>::apply ', 'flush (write_segment)': 'shard::write_segment ',
        'segment file': 'segment::file::write ', 'attribute columns: Split::push': 'Split::push ',
        'attribute columns: choose': 'attribute_columns::choose ', 'parquet ArrowWriter::write': 'ArrowWriter<W>::write ',
        'zstd compress': 'ZSTD_compress2 '}
got = {}
for line in sys.stdin:
    m = re.match(r'\s*([\d,]+) \(', line)
    if not m:
        continue
    for name, sym in want.items():
        if name not in got and sym in line + ' ':
            got[name] = int(m.group(1).replace(',', ''))
print('$bin', '($KIND, $OBJECTS objects)')
for name in want:
    print(f'  {name:34} {got.get(name, 0) / $OBJECTS:10.0f} instructions/object')
"
  rm -rf "$WORK/shard"
done
