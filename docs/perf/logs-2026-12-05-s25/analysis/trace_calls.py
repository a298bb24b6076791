#!/usr/bin/env python3
"""Reads the text form of a Go execution trace (`go tool trace -d=parsed
FILE > FILE.txt`) of run4/run4b and prints what store.md's twenty-third
round cites about where a remote put's first PutStart waits.

    trace_calls.py master-calls MASTER.txt
        one line per fast-path call the master served: when its request
        woke the connection's goroutine (µs since the trace began; add the
        trace's first Time to get CLOCK_MONOTONIC), how long until its
        answer was written, and how much of that was spent waiting for the
        Service's lock, waiting in a GC assist, and runnable but not
        running.
    trace_calls.py client-waits CLIENT.txt
        one line per fast-path call of the bench: the sendmsg of its
        request (CLOCK_MONOTONIC µs), the method, and how long its thread
        waited in ppoll for the answer.
    trace_calls.py stw MASTER.txt
        every stop-the-world range and how long it lasted.
    trace_calls.py goroutine FILE.txt FROM_US TO_US [GOID,...]
        the state transitions in a window (µs since the trace began),
        with the top of each transition's stack.

Both processes' trace clocks are CLOCK_MONOTONIC (each file's Sync
events give Mono beside Trace), so a client line and a master line can be
put side by side by subtracting the master trace's first Time."""
import collections
import re
import sys

EV = re.compile(r"M=(-?\d+) P=(-?\d+) G=(-?\d+) (\w+) Time=(\d+)(.*)")
TR = re.compile(r"GoID=(\d+) (\w+)->(\w+) Reason=\"(.*)\"")


def parse(path):
    evs, cur, into = [], None, None
    for line in open(path):
        if line.startswith("M="):
            m = EV.match(line)
            if not m:
                continue
            cur = {"G": int(m[3]), "kind": m[4], "t": int(m[5]), "rest": m[6].strip(), "stack": [], "tstack": []}
            evs.append(cur)
            into = None
        elif line.startswith("Stack="):
            into = "stack"
        elif line.startswith("TransitionStack="):
            into = "tstack"
        elif line.startswith("\t") and cur is not None and into:
            f = line.strip()
            if not f.startswith("/"):
                cur[into].append(f.split(" @ ")[0])
    return evs


def transitions(evs):
    for e in evs:
        if e["kind"] == "StateTransition":
            m = TR.match(e["rest"])
            if m:
                yield e, int(m[1]), m[2], m[3], m[4]


def master_calls(path):
    evs = parse(path)
    t0 = evs[0]["t"]
    per = collections.defaultdict(list)
    for e, g, a, b, r in transitions(evs):
        per[g].append(((e["t"] - t0) / 1e3, a, b, r, e["tstack"]))
    conns = [g for g, l in per.items() if any("serveFastConn" in f for x in l for f in x[4])]
    calls = []
    for g in conns:
        c, last = None, None
        for t, a, b, r, ts in per[g]:
            top = " ".join(ts[:8])
            if c is None:
                if a == "Waiting" and b == "Runnable":
                    c, last = {"g": g, "arrive": t, "lock": 0.0, "gc": 0.0, "runq": 0.0}, ("runnable", t)
                continue
            if a == "Runnable" and b == "Running":
                c["runq"] += t - last[1]
                last = ("run", t)
            elif b == "Waiting" and r == "sync" and "Service).lock" in top:
                last = ("lock", t)
            elif b == "Waiting" and "GC" in r:
                last = ("gc", t)
            elif a == "Waiting" and b == "Runnable":
                if last[0] in ("lock", "gc"):
                    c[last[0]] += t - last[1]
                last = ("runnable", t)
            elif a == "Running" and b == "Runnable":
                last = ("runnable", t)
            elif b == "Syscall" and "syscall.write" in top:
                c["answer"] = t
                calls.append(c)
                c = None
    print(f"# trace began at Time={t0} ns")
    for c in sorted(calls, key=lambda c: c["arrive"]):
        print(f"G{c['g']} arrive {c['arrive']:11.1f} answer-after {c['answer'] - c['arrive']:7.1f}us "
              f"lock-wait {c['lock']:7.1f} gc-wait {c['gc']:6.1f} runnable {c['runq']:6.1f}")


def client_waits(path):
    evs = parse(path)
    sent = {}
    meth = re.compile(r"master\.\(\*remote\)\.(PutStart|PutEnd|GetReplicas|ReleaseLeases|PutRevoke|Exists)$")
    for e, g, a, b, r in transitions(evs):
        ts, t = e["tstack"], e["t"] / 1e3
        if b == "Syscall" and any("fastConn).Write" in f for f in ts):
            name = next((meth.search(f)[1] for f in ts if meth.search(f)), "?")
            sent[g] = [t, name, None]
        elif b == "Syscall" and g in sent and any("fastConn).wait" in f for f in ts):
            sent[g][2] = t
        elif a == "Syscall" and g in sent and sent[g][2] is not None:
            t1, name, tp = sent.pop(g)
            print(f"{t1:13.1f} {name:13s} G{g:<5} answer-wait {t - tp:8.1f}us")


def stw(path):
    evs = parse(path)
    t0 = evs[0]["t"]
    open_ = {}
    for e in evs:
        m = re.search(r'Name="(stop-the-world[^"]*)"', e["rest"])
        if not m:
            continue
        if e["kind"] == "RangeBegin":
            open_[m[1]] = e["t"]
        elif e["kind"] == "RangeEnd" and m[1] in open_:
            b = open_.pop(m[1])
            print(f"{(b - t0) / 1e3:11.1f}us {m[1]:45s} {(e['t'] - b) / 1e3:7.1f}us")


def goroutine(path, lo, hi, gs):
    evs = parse(path)
    t0 = evs[0]["t"]
    for e, g, a, b, r in transitions(evs):
        t = (e["t"] - t0) / 1e3
        if lo <= t <= hi and (not gs or g in gs):
            top = " < ".join(f.split("/")[-1] for f in e["tstack"][:5])
            print(f"{t:11.1f}us G{g:<5} {a:>9}->{b:<9} {r:12s} {top}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "master-calls":
        master_calls(sys.argv[2])
    elif cmd == "client-waits":
        client_waits(sys.argv[2])
    elif cmd == "stw":
        stw(sys.argv[2])
    elif cmd == "goroutine":
        gs = {int(x) for x in sys.argv[5].split(",")} if len(sys.argv) > 5 else set()
        goroutine(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), gs)
    else:
        sys.exit(__doc__)
