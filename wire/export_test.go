package wire

// PlainRun is plainRun, for the tests of wire_test.
var PlainRun = plainRun
