"""A small MCPL server written against the 0.4 draft, for `mcpl check` to judge.

It speaks JSON-RPC 2.0 over stdio (one message per line) and answers what it knows; what
0.5 changed (the `version`, `featureSets` as an object keyed by name, the policy as a
Request) it does the 0.4 way, which is what `mcpl check` reports.
"""
import json
import sys

MANIFEST = {
    "version": "0.4",
    "pushEvents": True,
    "featureSets": [{"name": "notes.push", "uses": ["pushEvents"]}],
}


def answer(msg_id, result=None, error=None):
    reply = {"jsonrpc": "2.0", "id": msg_id}
    if error is None:
        reply["result"] = result
    else:
        reply["error"] = error
    print(json.dumps(reply), flush=True)


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
        continue
    method = msg["method"]
    if method == "initialize":
        answer(msg["id"], {
            "protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"mcpl": MANIFEST}},
            "serverInfo": {"name": "my_server", "version": "0.1"},
        })
    elif method == "ping":
        answer(msg["id"], {})
    else:
        answer(msg["id"], error={"code": -32601, "message": f"no method {method}"})
