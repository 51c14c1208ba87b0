#!/usr/bin/env python3
"""disk_bw.py — the disk's read bandwidth for the streaming tier's access pattern.

    bench/disk_bw.py FILE [SLICE_BYTES] [SECONDS] [QD...]

Reads random, 4 KiB-aligned ranges of SLICE_BYTES (default 606208: one Q4_K
expert matrix of the qwen36-a3b shape, page-widened) from FILE with O_DIRECT,
QD reads in flight (one thread each, os.preadv releases the GIL), for SECONDS
per queue depth (default 4), and prints GB/s per QD.  O_DIRECT bypasses the
page cache, so the number is the device's, not RAM's.  This is the
numerator of every "physical limit" in bench/RESULTS.md's streaming tables:
limit tok/s = GB/s / GB missed per token.
"""
import mmap, os, random, sys, threading, time

path = sys.argv[1]
slice_b = int(sys.argv[2]) if len(sys.argv) > 2 else 606208
secs = float(sys.argv[3]) if len(sys.argv) > 3 else 4.0
qds = [int(q) for q in sys.argv[4:]] or [1, 4, 16, 32]
size = os.path.getsize(path)
slice_b = (slice_b + 4095) // 4096 * 4096

def worker(fd, stop, tot, seed):
    rnd = random.Random(seed)
    buf = mmap.mmap(-1, slice_b)
    n = 0
    while not stop.is_set():
        off = rnd.randrange(0, (size - slice_b) // 4096) * 4096
        n += os.preadv(fd, [buf], off)
    tot.append(n)

for qd in qds:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    stop, tot = threading.Event(), []
    ts = [threading.Thread(target=worker, args=(fd, stop, tot, i * 7919 + qd)) for i in range(qd)]
    t0 = time.monotonic()
    for t in ts: t.start()
    time.sleep(secs)
    stop.set()
    for t in ts: t.join()
    dt = time.monotonic() - t0
    os.close(fd)
    print(f"qd {qd:3d}: {sum(tot) / dt / 1e9:.3f} GB/s ({slice_b} B reads, {dt:.1f} s)", flush=True)
