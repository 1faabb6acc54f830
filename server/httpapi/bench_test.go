package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/aephost/aep/server/httpapi"
)

// The benchmarks measure a /send + SSE round trip (one request, its reply
// read from the stream) for one session and for 32 concurrent sessions, each
// beside two neighbours measured in the same run:
//   - floor: a bare net/http server of the same shape (POST /session, POST
//     /send answering 202, GET /stream echoing each body as an SSE event)
//     with no validation or dispatch;
//   - mcp-go: a streamable-HTTP MCP server answering an echo tool, called by
//     mcp-go's own client.
// aep runs with the echo test namespace and audit on. See docs/PERFORMANCE.md.

var benchText = strings.Repeat("benchmark payload ", 16) // 288 bytes

// benchHTTP is the HTTP client of the aep and floor benchmarks: enough idle
// connections that 32 sessions never redial.
var benchHTTP = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

// lineSession is one session of a server of our shape, driven over raw HTTP
// with a minimal SSE reader, the same for aep and the floor.
type lineSession struct {
	base, sid string
	body      io.ReadCloser
	r         *bufio.Reader
}

func openLineSession(b *testing.B, base string) *lineSession {
	b.Helper()
	resp, err := benchHTTP.Post(base+"/session", "", nil)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, after, _ := bytes.Cut(raw, []byte(`"session_id":"`))
	sid, _, _ := bytes.Cut(after, []byte(`"`))
	req, _ := http.NewRequest(http.MethodGet, base+"/stream", nil)
	req.Header.Set("X-Session-Id", string(sid))
	sresp, err := benchHTTP.Do(req)
	if err != nil || sresp.StatusCode != 200 {
		b.Fatalf("stream: %v %v", err, sresp)
	}
	return &lineSession{base: base, sid: string(sid), body: sresp.Body, r: bufio.NewReaderSize(sresp.Body, 64<<10)}
}

func (s *lineSession) send(b *testing.B, line string) {
	req, _ := http.NewRequest(http.MethodPost, s.base+"/send", strings.NewReader(line))
	req.Header.Set("X-Session-Id", s.sid)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := benchHTTP.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("send: %d", resp.StatusCode)
	}
}

// next returns the data of the next event, skipping comments.
func (s *lineSession) next(b *testing.B) []byte {
	var data []byte
	for {
		line, err := s.r.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		switch {
		case len(line) == 1 && data != nil:
			return data
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data[:0], line[6:len(line)-1]...)
		}
	}
}

// benchLine is sayLine(id, benchText) without fmt, so that the client's
// cost, the same for aep and the floor, stays small beside the servers'.
func benchLine(id string) string {
	return `{"type":"echo/say/req","id":"` + id + `","proto":"1.0","ts":1,"text":` + benchQuoted + `}`
}

var benchQuoted = strconv.Quote(benchText)

func (s *lineSession) roundTrip(b *testing.B, id string) {
	s.send(b, benchLine(id))
	if d := s.next(b); !bytes.Contains(d, []byte(id)) {
		b.Fatalf("reply %s to %s", d, id)
	}
}

// floorHandler is the floor: our transport's shape, nothing else.
func floorHandler() http.Handler {
	var mu sync.Mutex
	sessions := map[string]chan []byte{}
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /session", func(w http.ResponseWriter, r *http.Request) {
		id := "f-" + strconv.FormatInt(n.Add(1), 10)
		mu.Lock()
		sessions[id] = make(chan []byte, 64)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"session_id":%q}`, id)
	})
	mux.HandleFunc("POST /send", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ch := sessions[r.Header.Get("X-Session-Id")]
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		ch <- body
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ch := sessions[r.Header.Get("X-Session-Id")]
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		var seq int
		buf := make([]byte, 0, 1024)
		for {
			select {
			case body := <-ch:
				seq++
				buf = append(buf[:0], "id: "...)
				buf = strconv.AppendInt(buf, int64(seq), 10)
				buf = append(buf, "\ndata: "...)
				buf = append(buf, body...)
				buf = append(buf, "\n\n"...)
				if _, err := w.Write(buf); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	return mux
}

func aepBase(b *testing.B) string {
	h := newHost(b, nil)
	return newServer(b, h, httpapi.Options{})
}

func floorBase(b *testing.B) string {
	ts := httptest.NewServer(floorHandler())
	b.Cleanup(ts.Close)
	return ts.URL
}

func aepSession(b *testing.B, base string) *lineSession {
	s := openLineSession(b, base)
	s.send(b, handshakeLine("h"))
	if d := s.next(b); !bytes.Contains(d, []byte(`"ok":true`)) {
		b.Fatalf("handshake: %s", d)
	}
	return s
}

func floorSession(b *testing.B, base string) *lineSession { return openLineSession(b, base) }

// BenchmarkRoundTrip is one session's /send + SSE round trip.
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("impl=floor", func(b *testing.B) {
		s := floorSession(b, floorBase(b))
		defer s.body.Close()
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			s.roundTrip(b, "r"+strconv.Itoa(i))
		}
	})
	b.Run("impl=aep", func(b *testing.B) {
		s := aepSession(b, aepBase(b))
		defer s.body.Close()
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			s.roundTrip(b, "r"+strconv.Itoa(i))
		}
	})
	b.Run("impl=mcp-go", func(b *testing.B) {
		c := mcpSession(b, mcpBase(b))
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			mcpCall(b, c, i)
		}
	})
}

// BenchmarkThroughput32 runs round trips on 32 concurrent sessions; ns/op is
// the time per round trip across all of them (throughput = 1e9/ns_op per s).
func BenchmarkThroughput32(b *testing.B) {
	const sessions = 32
	run := func(b *testing.B, open func() func(i int)) {
		trips := make([]func(int), sessions)
		for i := range trips {
			trips[i] = open()
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		defer measure(b)()
		for _, trip := range trips {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					trip(int(i))
				}
			}()
		}
		wg.Wait()
	}
	b.Run("impl=floor", func(b *testing.B) {
		base := floorBase(b)
		run(b, func() func(int) {
			s := floorSession(b, base)
			b.Cleanup(func() { s.body.Close() })
			return func(i int) { s.roundTrip(b, "r"+strconv.Itoa(i)) }
		})
	})
	b.Run("impl=aep", func(b *testing.B) {
		base := aepBase(b)
		run(b, func() func(int) {
			s := aepSession(b, base)
			b.Cleanup(func() { s.body.Close() })
			return func(i int) { s.roundTrip(b, "r"+strconv.Itoa(i)) }
		})
	})
	b.Run("impl=mcp-go", func(b *testing.B) {
		base := mcpBase(b)
		run(b, func() func(int) {
			c := mcpSession(b, base)
			return func(i int) { mcpCall(b, c, i) }
		})
	})
}

// mcpBase serves an mcp-go streamable-HTTP server with one echo tool.
func mcpBase(b *testing.B) string {
	s := mcpserver.NewMCPServer("bench", "1.0", mcpserver.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(req.GetString("text", "")), nil
		})
	ts := httptest.NewServer(mcpserver.NewStreamableHTTPServer(s))
	b.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func mcpSession(b *testing.B, url string) *mcpclient.Client {
	c, err := mcpclient.NewStreamableHttpClient(url, transport.WithHTTPBasicClient(benchHTTP))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func mcpCall(b *testing.B, c *mcpclient.Client, i int) {
	req := mcp.CallToolRequest{}
	req.Params.Name = "echo"
	req.Params.Arguments = map[string]any{"text": benchText}
	res, err := c.CallTool(context.Background(), req)
	if err != nil || res.IsError || len(res.Content) != 1 {
		b.Fatalf("call %d: %v %+v", i, err, res)
	}
}

// measure reports round trips per second and the process's CPU time per
// round trip (server and client together, audit included). On a shared
// machine CPU time is steadier than wall time, which waits for other
// processes too.
func measure(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
