#!/bin/sh
# Hidden tests of roman: prints the fraction that pass, last.
pass=0
total=0
expect() {
	total=$((total + 1))
	out=$(timeout 5 sh roman.sh "$1" 2>/dev/null)
	status=$?
	if [ "$out" = "$2" ] && [ "$status" -eq "$3" ]; then
		pass=$((pass + 1))
		echo "$1: ok"
	else
		echo "$1: FAIL (got '$out', status $status)"
	fi
}
expect 1 I 0
expect 4 IV 0
expect 9 IX 0
expect 14 XIV 0
expect 40 XL 0
expect 90 XC 0
expect 400 CD 0
expect 1994 MCMXCIV 0
expect 2024 MMXXIV 0
expect 3999 MMMCMXCIX 0
expect 0 "" 2
expect 4000 "" 2
expect abc "" 2
printf '%d.%03d\n' $((pass / total)) $((pass * 1000 / total % 1000))
