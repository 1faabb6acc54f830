package wire

import (
	"bytes"
	"encoding/json"
	"io"
)

// WriteLine writes v as one line of a JSON Lines export (trajectories,
// docs/trajectories.md): JSON with object keys sorted, no spaces, no
// HTML escaping, then a newline. The host's operator export, the Go
// client and both SDKs write an export's lines this way, so that one
// export is the same bytes whoever asked for it.
func WriteLine(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
