package sqlworker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/aephost/aep/capabilities/toolkits/sqlrun"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	big := int64(1) << 62
	in := Response{Query: &sqlrun.QueryOut{Columns: []string{"n"}, Rows: [][]any{{big}}}}
	if err := writeFrame(&buf, in); err != nil {
		t.Fatal(err)
	}
	var out Response
	if err := readFrame(bufio.NewReader(&buf), 1<<20, &out); err != nil {
		t.Fatal(err)
	}
	// An int64 of a row passes exactly (json.Number), not as a float64.
	if got := out.Query.Rows[0][0]; got.(interface{ String() string }).String() != "4611686018427387904" {
		t.Fatalf("got %v", got)
	}
}

func TestFrameBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"over the bound", []byte{0, 0, 4, 0}, ErrFrameTooLarge},
		{"cut short", []byte{0, 0, 0, 10, '{'}, io.ErrUnexpectedEOF},
		{"empty", nil, io.EOF},
	} {
		var r Response
		err := readFrame(bufio.NewReader(bytes.NewReader(tc.input)), 1000, &r)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzReadFrame: any bytes from a worker give a frame or an error, never a
// panic or a read past the bound.
func FuzzReadFrame(f *testing.F) {
	var ok bytes.Buffer
	writeFrame(&ok, Response{Error: "x", Kind: KindTimeout})
	f.Add(ok.Bytes())
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Response
		_ = readFrame(bufio.NewReader(bytes.NewReader(b)), 4096, &r)
	})
}
