package wire

import (
	"strconv"
	"unicode/utf8"
)

// MaxEcho bounds how many bytes of an agent's input an error message repeats
// (a `type`, a key, a file name): the error of a 1 MiB type must not be a
// 1 MiB reply, or every bad line would cost the host twice its size in
// buffered output (docs/SECURITY.md, The edge).
const MaxEcho = 128

// MaxReqIDEcho bounds the `req_id` of an error answering a line whose id is
// longer: the cut id no longer correlates, but an id is a handle chosen by
// the client and ids of real clients are far shorter.
const MaxReqIDEcho = 256

// Clip quotes s for an error message, cut to [MaxEcho] bytes at a character
// boundary; a cut value is followed by its full length.
func Clip(s string) string {
	if len(s) <= MaxEcho {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s, MaxEcho)) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// ClipID cuts a request id that an error message echoes as its `req_id` to
// [MaxReqIDEcho] bytes at a character boundary.
func ClipID(id string) string { return cut(id, MaxReqIDEcho) }

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
