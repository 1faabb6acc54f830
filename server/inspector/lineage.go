package inspector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"time"

	"github.com/aephost/aep/server/inspect"
)

// A session's lineage (docs/inspector.md, Lineage): the recorded sessions
// of its tree, snapshots' forks and fork groups with each branch's return,
// and a group's or a session's export, the very lines `aep export
// trajectories` writes from the same store.

// LineageNode is one recorded session of a lineage (server/persist,
// LineageNode).
type LineageNode struct {
	Handle        string  `json:"handle"`
	Parent        string  `json:"parent,omitempty"`
	ForkPoint     *int64  `json:"fork_point,omitempty"`
	Group         string  `json:"group,omitempty"`
	Records       int     `json:"records"`
	Steps         int     `json:"steps"`
	Return        float64 `json:"return"`
	EpisodeReturn float64 `json:"episode_return"`
}

// SnapshotRef is a stored snapshot a live session may restore (its own
// or its lineage's; server/operator, SnapshotNote).
type SnapshotRef struct {
	ID     string    `json:"id"`
	Target string    `json:"target"`
	Kind   string    `json:"kind"`
	At     time.Time `json:"at"`
	Bytes  int       `json:"bytes"`
}

// ExportRequest is what the page asks to export: a session (with its
// descendants) or a group, as `aep export trajectories` takes them.
type ExportRequest struct {
	Handle, Group  string
	Descendants    bool
	Prefix, Format string
}

var groupPattern = regexp.MustCompile(`^g-[0-9a-f]{32}$`)

// flush writes the records still queued, so that the store has what the
// session exchanged so far: Recorded does it first.
func (h *Handler) flush(ctx context.Context, handle string) {
	_, _, _ = h.o.Host.Recorded(ctx, handle, 1)
}

// lineage answers a session's lineage tree.
func (h *Handler) lineage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	handle := r.URL.Query().Get("handle")
	if !handlePattern.MatchString(handle) {
		apiError(w, http.StatusBadRequest, "bad_request", "handle: want a session handle, h- and 32 hex digits")
		return
	}
	if h.o.Lineage == nil {
		apiError(w, http.StatusNotFound, "unavailable", "this host keeps no store: no lineage is recorded")
		return
	}
	h.flush(r.Context(), handle)
	nodes, more, err := h.o.Lineage(r.Context(), handle)
	if err != nil {
		h.o.Logger.Warn("inspector: lineage unavailable", "session", handle, "err", err)
		apiError(w, http.StatusServiceUnavailable, "unavailable", "the store did not answer")
		return
	}
	snaps := []SnapshotRef{}
	if h.o.Snapshots != nil {
		if s, err := h.o.Snapshots(r.Context(), handle); err == nil {
			snaps = append(snaps, s...)
		}
	}
	h.o.Host.Audit(inspect.View{Action: "lineage", Session: handle, Started: start})
	if nodes == nil {
		nodes = []LineageNode{}
	}
	writeJSON(w, map[string]any{"handle": handle, "nodes": nodes, "truncated": more, "snapshots": snaps}, newRedactor(h.o.Host))
}

// export streams an export as `aep export trajectories` writes it. A line
// holding a secret the host knows now (the store's records were cut of
// the secrets known when they were written) is cut like any view; every
// other line is sent byte for byte.
func (h *Handler) export(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	q := r.URL.Query()
	req := ExportRequest{Handle: q.Get("handle"), Group: q.Get("group"), Descendants: q.Get("descendants") == "true",
		Prefix: q.Get("prefix"), Format: q.Get("format")}
	if (req.Handle == "") == (req.Group == "") || (req.Handle != "" && !handlePattern.MatchString(req.Handle)) ||
		(req.Group != "" && !groupPattern.MatchString(req.Group)) {
		apiError(w, http.StatusBadRequest, "bad_request", "want handle=h-… or group=g-…, one of them")
		return
	}
	if h.o.Export == nil {
		apiError(w, http.StatusNotFound, "unavailable", "this host keeps no store: nothing is recorded")
		return
	}
	h.flush(r.Context(), req.Handle)
	var buf bytes.Buffer
	n, err := h.o.Export(r.Context(), req, &buf)
	target := req.Group
	if target == "" {
		target = req.Handle
	}
	if err != nil {
		h.o.Host.Audit(inspect.View{Action: "export", Session: req.Handle, Target: target, Code: "bad_request", Started: start})
		apiError(w, http.StatusBadRequest, "bad_request", clip(err.Error()))
		return
	}
	h.o.Host.Audit(inspect.View{Action: "export", Session: req.Handle, Target: target, Started: start})
	red := newRedactor(h.o.Host)
	red.refresh()
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("X-Aep-Records", jsonInt(n))
	bw := bufio.NewWriter(w)
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = bw.Write(cutLine(red, line))
		_ = bw.WriteByte('\n')
	}
	_ = bw.Flush()
}

// cutLine returns line as it is when cutting changes nothing in it, else
// the cut line.
func cutLine(red *redactor, line []byte) []byte {
	cut := red.line(line, nil)
	plain := red.plain(line)
	if bytes.Equal(cut, plain) {
		return line
	}
	return cut
}

// plain is line decoded and encoded as red.line does, with nothing cut.
func (r *redactor) plain(line []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		out, _ := json.Marshal(string(line))
		return out
	}
	out, _ := json.Marshal(v)
	return out
}

func jsonInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
