"""Attributes the samples of `perf script -F comm,ip,sym --no-inline` to the parts of a call.

Each sample goes to the innermost frame that matches one of the groups below (the order breaks
ties at one depth); the last column is the share whose leaf is in malloc/free.
    python3 scripts/profile/attribute.py /tmp/NAME.script
"""
import sys,re,collections
samples=[];cur=None
for line in open(sys.argv[1]):
    if not line.strip():
        if cur: samples.append(cur); cur=None
        continue
    if not line[0].isspace(): cur=[];continue
    p=line.strip().split(None,1); cur.append(p[1] if len(p)>1 else '?')
N=len(samples)
# innermost match wins; order = priority among frames at the same depth
comps=[
 ("ledger: SQLite statements, commit, fsync", r"sqlite3|rusqlite|postern_ledger::(db|writer|combiner)"),
 ("ledger: other (queue, hand-off, calls log, deferral)", r"postern_ledger::"),
 ("schema validation", r"jsonschema|ToolEntry::validate"),
 ("canonicalisation + HMAC fingerprint + record", r"postern_core::(canon|fingerprint|record)|hmac|sha2|Sha256"),
 ("HTTP client to the target (reqwest, URL, connect)", r"postern_channels::|reqwest::|hyper_util::client|hyper::client|url::"),
 ("MCP: rmcp (parse, serialise, SSE, per-request service)", r"rmcp::|sse_stream"),
 ("front: guard, strict parse, delivery, streams, result", r"postern_front::"),
 ("pipeline: admission, dispatch, report", r"postern_pipeline::|postern_core::"),
 ("JSON (serde_json, outside the above)", r"serde_json|serde::"),
 ("spans and metrics", r"tracing|metrics::|opentelemetry"),
 ("HTTP server (hyper, axum, tower)", r"hyper::|axum|tower|http::"),
 ("socket reads and writes (loopback TCP, kernel)", r"tokio::net|tokio::io|mio::net|tcp_|sock_|skb|__sys_send|__sys_recv|sendto|recvfrom|writev|readv|ip_|__x64_sys_read|__x64_sys_write|inet_"),
 ("task scheduling and wake-ups (tokio, futex, context switches)", r"tokio::|mio::|futex|schedule|finish_task_switch|try_to_wake|parking_lot|epoll|ep_poll"),
]
c=collections.Counter(); alloc=collections.Counter()
for s in samples:
    hit=None
    for f in s:
        for name,rx in comps:
            if re.search(rx,f): hit=name;break
        if hit: break
    hit=hit or "unattributed (kernel network and syscalls, libc)"
    c[hit]+=1
    if re.search(r"malloc|free|realloc|unlink_chunk|_int_|memalign",s[0]): alloc[hit]+=1
for k,v in c.most_common(): print(f"| {k} | {100*v/N:.1f}% | {100*alloc[k]/N:.1f}% |")
print("samples",N, "alloc total %.1f%%"%(100*sum(alloc.values())/N))
