#!/bin/sh
# The conformance fixture's skill: echoes its arguments (JSON on stdin),
# with one event of each kind on stderr, which the host turns into
# skill/event events and the result's events.
input=$(cat)
echo '{"kind":"status","data":{"message":"started"}}' >&2
echo '{"kind":"progress","data":{"pct":50,"message":"half"}}' >&2
echo '{"kind":"artifact","data":{"name":"echo.txt","mime":"text/plain","chunk":"x","final":true}}' >&2
echo '{"kind":"log","data":{"level":"info","message":"done"}}' >&2
printf '{"echo":%s}\n' "$input"
