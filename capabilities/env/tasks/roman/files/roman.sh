#!/bin/sh
# Print the Roman numeral of $1 here.
exit 2
