#!/bin/sh
# Test skill: echoes its arguments, with one event of each kind on stderr.
input=$(cat)
echo '{"kind":"status","data":{"message":"started"}}' >&2
echo '{"kind":"progress","data":{"pct":50,"message":"half"}}' >&2
echo 'a plain stderr line' >&2
echo '{"kind":"artifact","name":"out.txt","mime":"text/plain","chunk":"x","final":true}' >&2
echo '{"kind":"log","data":{"level":"info","message":"done"}}' >&2
printf '{"echo":%s,"version":"%s"}\n' "$input" "$SKILL_VERSION"
