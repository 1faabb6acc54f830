#!/bin/sh
# Test skill: reports which writes succeed. $1 of stdin is a host path outside the work dir.
target=$(cat | sed -n 's/.*"target":"\([^"]*\)".*/\1/p')
try() { if (echo x > "$1") 2>/dev/null; then echo true; else echo false; fi; }
printf '{"work":%s,"skill_dir":%s,"etc":%s,"tmp_outside":%s}\n' "$(try ./ok)" "$(try "$SKILL_DIR/x")" "$(try /etc/aep-skill-escape)" "$(try "$target")"
