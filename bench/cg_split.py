#!/usr/bin/env python3
"""Split callgrind output into self instructions per thread and per part.

usage: cg_split.py N FILE...   (N = requests the counted run carried;
FILE = one callgrind file per thread, from --separate-threads=yes)

A thread is named by the first of its functions found in THREADS (the
ledger writer, ...; the worker by its event loop, as counting starts
after worker_main was entered).  Its self cost (the
instructions executed in a function's own code, calls excluded) is summed
per shared object and grouped into parts: the program's own code (llmux
or nginx), libcurl,
libc's allocator, libc's memory/string routines, the rest of libc,
libevent, http_parser, jansson, SQLite, the rest.  Call counts of the
allocator entries are printed too (calls per request).  Reads only the
callgrind text format (ob=/fn=/calls=/cost lines, name compression)."""
import re
import sys

THREADS = [("ledger writer", "writer_main"),
           ("ledger checkpointer", "checkpointer_main"), ("aux", "aux_main"),
           ("worker", "event_base_loop"),
           ("nginx", "ngx_epoll_process_events"), ("main", "main")]
ALLOC = {"malloc", "free", "calloc", "realloc", "cfree", "_int_malloc",
         "_int_free", "malloc_consolidate", "_int_realloc", "tcache_init",
         "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
         "unlink_chunk.constprop.0", "unlink_chunk", "alloc_perturb",
         "_int_free_merge_chunk", "_int_free_create_chunk",
         "_int_free_maybe_consolidate.part.0", "tcache_get", "tcache_put",
         "checked_request2size", "sysmalloc"}
MEMSTR = re.compile(r"^(__)?(mem|str|wmem|stp|rawmemchr)")
COUNTED = ("malloc", "calloc", "realloc", "free")


def part_of(ob, fn):
    o = ob.rsplit("/", 1)[-1]
    if o.startswith("libc.so") or o.startswith("libc-"):
        if fn in ALLOC or "malloc" in fn or "_int_free" in fn:
            return "libc malloc/free"
        if MEMSTR.match(fn):
            return "libc mem*/str*"
        return "libc other"
    for key, name in (("libcurl", "libcurl"), ("libevent", "libevent"),
                      ("libhttp_parser", "http_parser"),
                      ("libjansson", "jansson"), ("libsqlite3", "SQLite"),
                      ("llmux", "own code"), ("nginx", "own code")):
        if o.startswith(key):
            return name
    if o.startswith("ld-linux"):
        return "ld.so"
    return "other (" + o + ")"


def parse(path):
    names = {"ob": {}, "fl": {}, "fn": {}}
    ns = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl",
          "cfi": "fl", "cfl": "fl", "fn": "fn", "cfn": "fn"}
    comp = re.compile(r"^\((\d+)\)(?: (.*))?$")

    def name(kind, val):
        m = comp.match(val)
        if not m:
            return val
        tab = names[ns[kind]]
        if m.group(2) is not None:
            tab[m.group(1)] = m.group(2)
        return tab.get(m.group(1), "?")

    self_cost = {}  # (ob, fn) -> Ir
    calls = {}      # callee fn -> calls
    ob = fn = "?"
    cfn = None
    skip_next = False
    fns = set()
    with open(path, errors="replace") as f:
        for line in f:
            c = line[0] if line else ""
            if c.isdigit() or c in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    k = (ob, fn)
                    self_cost[k] = self_cost.get(k, 0) + int(parts[1])
                continue
            if "=" not in line:
                continue
            key, val = line.rstrip("\n").split("=", 1)
            if key == "ob":
                ob = name(key, val)
            elif key == "fn":
                fn = name(key, val)
                fns.add(fn)
            elif key == "cfn":
                cfn = name(key, val)
            elif key in ("cob", "fl", "fi", "fe", "cfi", "cfl"):
                name(key, val)
            elif key == "calls":
                skip_next = True
                if cfn is not None and fn not in ALLOC:
                    n = int(val.split()[0])
                    calls[cfn] = calls.get(cfn, 0) + n
                cfn = None
    return self_cost, calls, fns


def main():
    n = float(sys.argv[1])
    rows = []
    for path in sys.argv[2:]:
        self_cost, calls, fns = parse(path)
        total = sum(self_cost.values())
        if total == 0:
            continue
        tname = next((t for t, f in THREADS if f in fns), "thread")
        parts = {}
        for (ob, fn), v in self_cost.items():
            p = part_of(ob, fn)
            parts[p] = parts.get(p, 0) + v
        rows.append((tname, total, parts, calls))
    order = ["own code", "libcurl", "libc malloc/free", "libc mem*/str*",
             "libc other", "libevent", "http_parser", "jansson", "SQLite",
             "ld.so"]
    print("| thread | all | " + " | ".join(order) + " | other | calls to malloc+calloc+realloc / free (free(NULL) included) |")
    print("|---" * (len(order) + 4) + "|")
    for tname, total, parts, calls in sorted(rows, key=lambda r: -r[1]):
        if total / n < 50:
            continue
        rest = total - sum(parts.get(p, 0) for p in order)
        cells = ["%.1fk" % (parts.get(p, 0) / n / 1000) for p in order]
        al = sum(calls.get(x, 0) for x in COUNTED[:3])
        print("| %s | %.1fk | %s | %.1fk | %.1f / %.1f |" % (
            tname, total / n / 1000, " | ".join(cells), rest / n / 1000,
            al / n, calls.get("free", 0) / n))


if __name__ == "__main__":
    main()
