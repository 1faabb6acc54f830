#!/bin/sh
# Golden-test skill: reads {"name": …} on stdin, reports progress on
# stderr as skill events, and prints its greeting as JSON on stdout.
input=$(cat)
name=${input#*\"name\":\"}
name=${name%%\"*}
echo '{"kind":"progress","data":{"pct":50,"message":"composing"}}' >&2
printf '{"greeting":"warm greetings, %s"}\n' "$name"
