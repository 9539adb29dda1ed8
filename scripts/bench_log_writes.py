#!/usr/bin/env python3
"""CPU of the Raft log's write pattern, new files against files written over.

Writes 3 GiB as the log does under ingest (88 KiB pwrites, an fdatasync every two, files of
64 MiB): either each file new (created, written, deleted), or one of 8 files written over in
place. Prints the process's CPU seconds per GiB (user + system) for each way, twice, in turns.
docs/BENCHMARKS.md, "Raft log files written over".
    scripts/bench_log_writes.py [DIR]
"""
import os
import resource
import sys
import tempfile

CHUNK, FILE, TOTAL, FILES = 88 << 10, 64 << 20, 3 << 30, 8


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(directory, over):
    block = os.urandom(CHUNK)
    paths = [os.path.join(directory, f"f{i}") for i in range(FILES)]
    if over:
        for path in paths:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            for offset in range(0, FILE, CHUNK):
                os.pwrite(fd, block, offset)
            os.fdatasync(fd)
            os.close(fd)
    start, written, writes, n = cpu(), 0, 0, 0
    while written < TOTAL:
        path = paths[n % FILES]
        n += 1
        if over:
            fd = os.open(path, os.O_WRONLY)
        else:
            if os.path.exists(path):
                os.unlink(path)
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
        for offset in range(0, FILE - CHUNK + 1, CHUNK):
            os.pwrite(fd, block, offset)
            written += CHUNK
            writes += 1
            if writes % 2 == 0:
                os.fdatasync(fd)
        os.fdatasync(fd)
        os.close(fd)
    seconds = cpu() - start
    for path in paths:
        if os.path.exists(path):
            os.unlink(path)
    return seconds / (written / (1 << 30))


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else None
    for _ in range(2):
        for over in (False, True):
            with tempfile.TemporaryDirectory(dir=base) as d:
                way = "written over" if over else "new files"
                print(f"{way}: {run(d, over):.3f} CPU s per GiB", flush=True)


if __name__ == "__main__":
    main()
