#!/usr/bin/env python3
"""The Raft log's disk space under a long analytics ingest (docs/RELIABILITY.md, "Disk").

Starts `sextant dev` (release build) on a fresh directory, sends `/v1/batch` events with the
load generator until MILLIONS million events are applied, and samples the node's disk metrics
every INTERVAL seconds: the Raft log's bytes (allocated blocks) against the events applied,
the segments' bytes and the bytes of request bodies sent. Prints one line per sample and a
summary as JSON; SETTLE seconds after the load (default 0) it samples once more, for the
flushes by age.

    scripts/bench_log_space.py [MILLIONS] [--settle SECONDS]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from dev_server import DevServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SEXTANT_BIN", os.path.join(ROOT, "target/release/sextant"))


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {"applied_rows": 0.0}
    for line in text.splitlines():
        m = re.match(r'^sextant_node_disk_bytes\{component="(\w+)"\} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
        m = re.match(r'^sextant_node_applied_rows_total\{[^}]*\} (\S+)$', line)
        if m:
            out["applied_rows"] += float(m.group(1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("millions", type=float, nargs="?", default=100)
    ap.add_argument("--settle", type=int, default=0)
    ap.add_argument("--interval", type=int, default=10)
    args = ap.parse_args()
    target = int(args.millions * 1_000_000)
    work = tempfile.mkdtemp(prefix="sextant-logspace-")
    try:
        dev = DevServer(BIN, os.path.join(work, "data"), os.path.join(work, "dev.log"), unlimited=False)
    except RuntimeError as e:
        sys.exit(str(e))
    url, iurl, creds = dev.url, dev.internal_url, dev.creds_path
    try:
        samples, sent = [], {"bytes": 0.0}
        start = time.time()

        def sample(phase):
            m = metrics(iurl)
            s = {"phase": phase, "seconds": round(time.time() - start, 1), "events": int(m.get("applied_rows", 0)),
                 "raft_log_mib": round(m.get("raft_log", 0) / 2**20, 1),
                 "segments_mib": round(m.get("segments", 0) / 2**20, 1),
                 "sent_mib": round(sent["bytes"] / 2**20, 1)}
            samples.append(s)
            print(json.dumps(s), flush=True)
            return s

        stop = threading.Event()

        def sampler():
            while not stop.wait(args.interval):
                sample("load")

        t = threading.Thread(target=sampler, daemon=True)
        t.start()
        while True:
            r = subprocess.run([BIN, "loadgen", "--url", url, "--credentials", creds, "--kind", "events",
                                "--batch", "1000", "--concurrency", "8", "--seconds", "30", "--json", "--no-ceiling"],
                               capture_output=True, text=True, check=True)
            run = json.loads(r.stdout.strip().splitlines()[-1])
            sent["bytes"] += run["mb_per_sec"] * 1e6 * run["seconds"]
            if metrics(iurl).get("applied_rows", 0) >= target:
                break
        stop.set()
        t.join()
        end = sample("end of load")
        if args.settle:
            time.sleep(args.settle)
            sample(f"{args.settle} s later")
        load = [s for s in samples if s["phase"] != f"{args.settle} s later"]
        print(json.dumps({"events": end["events"], "seconds": end["seconds"],
                          "events_per_sec": round(end["events"] / end["seconds"]),
                          "sent_mib": end["sent_mib"],
                          "raft_log_peak_mib": max(s["raft_log_mib"] for s in load),
                          "raft_log_end_mib": end["raft_log_mib"], "segments_end_mib": end["segments_mib"],
                          "final": samples[-1]}))
    finally:
        dev.stop()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
