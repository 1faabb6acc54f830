"""The Python client quicktype generates from the contract (aep.py) sends
one line of every message type an agent sends to a real host, through the
single exchange (POST /send with Accept: application/json, the standard
library's urllib: no WebSocket or SSE library). Each line is decoded with
the generated type of its message (<def>_from_dict) and sent as that type
serializes (<def>_to_dict, which leaves absent fields out). A reply that
refuses a line as malformed (parse_error, schema_violation,
version_mismatch), or a refused handshake, fails the run.

usage: python3 send.py <host base URL> <requests.json>
"""
import json
import sys
import urllib.error
import urllib.request

import aep

MALFORMED = {"parse_error", "schema_violation", "version_mismatch"}


def functions(suffix):
    """The generated functions ending in suffix, by the def name they serve
    in lower case without underscores (mcp_server_list_req_message_to_dict
    → mcpserverlistreqmessage)."""
    out = {}
    for name in dir(aep):
        if name.endswith(suffix) and callable(getattr(aep, name)):
            out[name[: -len(suffix)].replace("_", "").lower()] = getattr(aep, name)
    return out


def post(url, body, headers):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    if len(sys.argv) != 3:
        print("usage: send.py <host base URL> <requests.json>", file=sys.stderr)
        return 2
    base = sys.argv[1]
    with open(sys.argv[2], encoding="utf-8") as f:
        reqs = json.load(f)
    decode, encode = functions("_from_dict"), functions("_to_dict")
    status, body = post(base + "/session", b"", {})
    session = json.loads(body)["session_id"]
    bad = 0
    for r in reqs:
        key = r["def"].lower()
        if key not in decode or key not in encode:
            print(f"python client: no generated functions for {r['def']}", file=sys.stderr)
            return 1
        try:
            line = json.dumps(encode[key](decode[key](json.loads(r["line"]))), ensure_ascii=False).encode()
        except Exception as e:  # the generated code raises AssertionError, ValueError …
            bad += 1
            print(f"FAIL {r['type']} {r['name']}: the generated type does not round-trip the line: {e!r}", file=sys.stderr)
            continue
        status, reply = post(base + "/send", line, {"X-Session-Id": session, "Content-Type": "application/json", "Accept": "application/json"})
        if status == 202:
            print(f"{r['type']:32} {r['name']:24} 202 (a notification)")
            continue
        try:
            m = json.loads(reply)
        except ValueError:
            m = {}
        if status != 200 or "type" not in m:
            bad += 1
            print(f"FAIL {r['type']} {r['name']}: HTTP {status} {reply!r}", file=sys.stderr)
        elif (m["type"] == "error" and m.get("code") in MALFORMED) or (m["type"] == "handshake/resp" and m.get("ok") is not True):
            bad += 1
            print(f"FAIL {r['type']} {r['name']}: sent {line.decode()}\n  answered {reply.decode()}", file=sys.stderr)
        else:
            print(f"{r['type']:32} {r['name']:24} {m['type']} {m.get('code', '')}")
    if bad:
        print(f"python client: {bad} of {len(reqs)} lines refused or not sent", file=sys.stderr)
        return 1
    print(f"python (quicktype): {len(reqs)} lines of {len({r['type'] for r in reqs})} message types sent, none refused as malformed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
