package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aephost/aep/conformance"
	admin "github.com/aephost/aep/gen/adminapi"
)

// errNotConformant is the exit status of a host that breaks a rule: the
// report says which.
var errNotConformant = errors.New("the host is not conformant")

// cmdConformance runs the conformance kit against a running host
// (conformance.Run): over HTTP+SSE or WebSocket (--url; --exchange for
// single exchanges) or a command speaking stdio (--stdio, started once per
// session).
func cmdConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("conformance", stderr)
	url := f.String("url", "", "the host's `URL`: its HTTP base (http://127.0.0.1:8765) for HTTP+SSE, or its WebSocket endpoint (ws://127.0.0.1:8765/ws)")
	exchange := f.Bool("exchange", false, "with an http:// --url: send each request as a single exchange (POST /send answered with its events and reply) instead of reading GET /stream")
	stdio := f.String("stdio", "", "a shell `CMD` that serves one session on its stdin/stdout, e.g. 'aep serve --stdio'")
	token := f.String("token", os.Getenv("AEP_AUTH_TOKEN"), "the host's auth_token (default $AEP_AUTH_TOKEN)")
	examples := f.String("examples", "", "a `DIR` of example messages (<type>/<name>.json; names starting with invalid are invalid); default: the kit's own")
	invalidOnly := f.String("invalid-examples", "", "a `DIR` of examples of which only the invalid ones are sent, beside the kit's own valid ones: for a directory whose valid examples name things no fresh host has (an episode \"x\"), such as schemas/examples")
	events := f.String("events", "", "a request `JSON` that makes the host send events, e.g. a streaming tool call")
	asJSON := f.Bool("json", false, "print the report as JSON")
	timeout := f.Duration("timeout", 10*time.Second, "how long to wait for one reply")
	recordPath := f.String("record", "", "write every line of every session to `FILE` (NDJSON records: from, line, example)")
	hostLog := f.Bool("host-log", false, "with --stdio: pass the host's stderr through (default: discarded)")
	operator := f.String("operator", "", "the host's operator listener `ADDR` (operator.listen): the session.operator rule opens a session there through the admin API, with the token of $AEP_OPERATOR_TOKEN, and attaches to it over --url")
	operatorTenant := f.String("operator-tenant", "default", "the `TENANT` the operator's session is opened for")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep conformance (--url URL [--exchange] | --stdio CMD) [--token TOKEN] [--json] [flags]\n\nChecks a running host against the protocol's contract, one result per rule with its spec section.\nExits 1 when a rule fails.\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args); err != nil {
		return err
	}
	if (*url == "") == (*stdio == "") || f.NArg() > 0 {
		fmt.Fprintln(stderr, "aep conformance: give exactly one of --url and --stdio")
		f.Usage()
		return errUsage
	}
	opts := conformance.Options{Token: *token, Timeout: *timeout}
	if *events != "" {
		if !json.Valid([]byte(*events)) {
			return fmt.Errorf("--events is not JSON")
		}
		opts.EventsRequest = []byte(*events)
	}
	if *examples != "" && *invalidOnly != "" {
		return fmt.Errorf("give one of --examples and --invalid-examples")
	}
	if *examples != "" {
		ex, err := conformance.LoadExamples(os.DirFS(*examples))
		if err != nil {
			return err
		}
		opts.Examples = ex
	}
	if *invalidOnly != "" {
		ex, err := conformance.LoadExamples(os.DirFS(*invalidOnly))
		if err != nil {
			return err
		}
		for _, e := range conformance.BuiltinExamples() {
			if e.Valid {
				opts.Examples = append(opts.Examples, e)
			}
		}
		for _, e := range ex {
			if !e.Valid {
				opts.Examples = append(opts.Examples, e)
			}
		}
	}
	if *recordPath != "" {
		rf, err := os.Create(*recordPath)
		if err != nil {
			return err
		}
		defer rf.Close()
		opts.Record = rf
	}
	var dial conformance.Dialer
	switch {
	case strings.HasPrefix(*url, "ws://") || strings.HasPrefix(*url, "wss://"):
		if *exchange {
			return fmt.Errorf("--exchange is for an http:// --url")
		}
		dial = conformance.WebSocketDialer(*url, nil)
	case *url != "" && *exchange:
		dial = conformance.ExchangeDialer(*url, nil)
	case *url != "":
		dial = conformance.HTTPDialer(*url, nil)
	default:
		var logs io.Writer = io.Discard
		if *hostLog {
			logs = stderr
		}
		dial = conformance.StdioDialer(*stdio, logs)
	}
	if *operator != "" {
		if *url == "" {
			return fmt.Errorf("--operator needs --url: a stdio host serves one session, which nobody opens for it")
		}
		cl, err := newAdminClient(*operator)
		if err != nil {
			return err
		}
		opts.OperatorSession = func(ctx context.Context) (conformance.Conn, string, error) {
			res, err := cl.AdminOpenSessionWithResponse(ctx, admin.AdminOpenSessionRequest{Tenant: *operatorTenant})
			if err := check(res, http.StatusCreated, err); err != nil {
				return nil, "", err
			}
			o := res.JSON201
			var conn conformance.Conn
			switch {
			case strings.HasPrefix(*url, "ws://") || strings.HasPrefix(*url, "wss://"):
				conn, err = conformance.WebSocketDialer(*url, http.Header{"X-Session-Id": {o.SessionId}})(ctx)
			case *exchange:
				conn = conformance.ExchangeAttach(*url, nil, o.SessionId)
			default:
				conn, err = conformance.HTTPAttach(ctx, *url, nil, o.SessionId)
			}
			return conn, o.Token, err
		}
	}
	rep, err := conformance.Run(ctx, dial, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if !rep.OK {
		return errNotConformant
	}
	return nil
}
