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
// session), with the host's fixture and baseline files; with
// --all-transports over each transport the host offers, compared
// (conformance.Compare).
func cmdConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("conformance", stderr)
	url := f.String("url", "", "the host's `URL`: its HTTP base (http://127.0.0.1:8765) for HTTP+SSE, or its WebSocket endpoint (ws://127.0.0.1:8765/ws)")
	exchange := f.Bool("exchange", false, "with an http:// --url: send each request as a single exchange (POST /send answered with its events and reply) instead of reading GET /stream")
	stdio := f.String("stdio", "", "a shell `CMD` that serves one session on its stdin/stdout, e.g. 'aep serve --stdio'")
	token := f.String("token", os.Getenv("AEP_AUTH_TOKEN"), "the host's auth_token (default $AEP_AUTH_TOKEN)")
	examples := f.String("examples", "", "a `DIR` of example messages (<type>/<name>.json; names starting with invalid are invalid); default: the kit's own")
	invalidOnly := f.String("invalid-examples", "", "a `DIR` of examples of which only the invalid ones are sent, beside the kit's own valid ones: for a directory whose valid examples name things no fresh host has (an episode \"x\"), such as schemas/examples")
	events := f.String("events", "", "a request `JSON` that makes the host send events, e.g. a streaming tool call")
	fixture := f.String("fixture", "", "the host's fixture `FILE` (JSON, conformance/fixture.schema.json): content the checks that need it use; without it they skip")
	baseline := f.String("baseline", "", "the host's baseline `FILE` (JSON, conformance/baseline.schema.json): the checks it is expected to fail")
	only := f.String("only", "", "run only the checks named, a comma-separated `LIST` of check IDs or prefixes (isolation, tools.)")
	strict := f.Bool("strict", false, "exit 1 on a SHOULD failure too")
	list := f.Bool("list", false, "list the checks (ID, level, what it cites, what it needs) and exit")
	asJSON := f.Bool("json", false, "print the report as JSON")
	timeout := f.Duration("timeout", 10*time.Second, "how long to wait for one reply")
	recordPath := f.String("record", "", "write every line of every session to `FILE` (NDJSON records: from, line, example)")
	hostLog := f.Bool("host-log", false, "with --stdio: pass the host's stderr through (default: discarded)")
	operator := f.String("operator", "", "the host's operator listener `ADDR` (operator.listen): session.operator opens a session there through the admin API, with the token of $AEP_OPERATOR_TOKEN, and reaches it over --url")
	operatorTenant := f.String("operator-tenant", "default", "the `TENANT` the operator's session is opened for: the one --token is a secret of")
	all := f.Bool("all-transports", false, "run the kit over every transport the host offers at --url (HTTP+SSE, single exchanges, WebSocket) and over --stdio too when given, and compare their answers (transports.agree)")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep conformance (--url URL [--exchange] | --stdio CMD) [--token TOKEN] [--fixture FILE] [--baseline FILE] [--json] [flags]\n       aep conformance --all-transports --url URL [--stdio CMD] [flags]\n       aep conformance --list\n\nChecks a running host against the protocol: one result per check, MUST or SHOULD, with the spec\nsection or schema it cites (docs/contract.md). Exits 1 when a MUST check fails that the baseline\ndoes not list (with --strict, a SHOULD check too). With --all-transports it runs over each transport\nthe host offers and compares their answers: a difference is a MUST failure (transports.agree).\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args); err != nil {
		return err
	}
	if *list {
		return listChecks(stdout, *asJSON)
	}
	switch {
	case f.NArg() > 0:
		f.Usage()
		return errUsage
	case *all && *url == "":
		fmt.Fprintln(stderr, "aep conformance: --all-transports needs --url (and takes --stdio beside it)")
		f.Usage()
		return errUsage
	case *all && *exchange:
		fmt.Fprintln(stderr, "aep conformance: --all-transports runs single exchanges among the others; leave --exchange out")
		f.Usage()
		return errUsage
	case !*all && (*url == "") == (*stdio == ""):
		fmt.Fprintln(stderr, "aep conformance: give exactly one of --url and --stdio")
		f.Usage()
		return errUsage
	}
	opts := conformance.Options{Token: *token, Timeout: *timeout}
	if *fixture != "" {
		fx, err := conformance.LoadFixture(*fixture)
		if err != nil {
			return err
		}
		opts.Fixture = fx
	}
	if *baseline != "" {
		bl, err := conformance.LoadBaseline(*baseline)
		if err != nil {
			return err
		}
		opts.Baseline = bl
	}
	if *only != "" {
		for _, o := range strings.Split(*only, ",") {
			if o = strings.TrimSpace(o); o != "" {
				opts.Only = append(opts.Only, o)
			}
		}
	}
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
	if *operator != "" {
		if *url == "" {
			return fmt.Errorf("--operator needs --url: a stdio host serves one session, which nobody opens for it")
		}
		cl, err := newAdminClient(*operator)
		if err != nil {
			return err
		}
		opts.OperatorSession = func(ctx context.Context) (string, string, error) {
			res, err := cl.AdminOpenSessionWithResponse(ctx, admin.AdminOpenSessionRequest{Tenant: *operatorTenant})
			if err := check(res, http.StatusCreated, err); err != nil {
				return "", "", err
			}
			return res.JSON201.SessionId, res.JSON201.Token, nil
		}
	}
	var logs io.Writer = io.Discard
	if *hostLog {
		logs = stderr
	}
	if *all {
		return compareTransports(ctx, *url, *stdio, logs, opts, *asJSON, *strict, stdout, stderr)
	}
	var target conformance.Target
	switch {
	case strings.HasPrefix(*url, "ws://") || strings.HasPrefix(*url, "wss://"):
		if *exchange {
			return fmt.Errorf("--exchange is for an http:// --url")
		}
		target = conformance.WebSocketTarget(*url, nil)
	case *url != "" && *exchange:
		target = conformance.ExchangeTarget(*url, nil)
	case *url != "":
		target = conformance.HTTPTarget(*url, nil)
	default:
		target = conformance.StdioTarget(*stdio, logs)
	}
	rep, err := conformance.Run(ctx, target, opts)
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
	if !rep.OK || *strict && rep.Summary.FailShould > 0 {
		return errNotConformant
	}
	return nil
}

// compareTransports runs the kit over every transport the host at url
// offers, and over the stdio command when given, and compares the runs
// (conformance.Compare). A transport the host does not offer is named on
// stderr and left out; fewer than two is an error.
func compareTransports(ctx context.Context, url, stdio string, logs io.Writer, opts conformance.Options, asJSON, strict bool, stdout, stderr io.Writer) error {
	var targets []conformance.Target
	if stdio != "" {
		targets = append(targets, conformance.StdioTarget(stdio, logs))
	}
	offered, missing := conformance.Transports(ctx, url, opts.Timeout)
	targets = append(targets, offered...)
	for _, name := range []string{"http", "exchange", "websocket"} {
		if err := missing[name]; err != nil {
			fmt.Fprintf(stderr, "aep conformance: %s: the host does not offer it (%v); left out of the comparison\n", name, err)
		}
	}
	if len(targets) < 2 {
		return fmt.Errorf("the host offers %d transport(s) the kit can reach: nothing to compare", len(targets))
	}
	c, err := conformance.Compare(ctx, targets, opts)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(c); err != nil {
			return err
		}
	} else if err := c.WriteText(stdout); err != nil {
		return err
	}
	should := 0
	for _, r := range c.Reports {
		should += r.Summary.FailShould
	}
	if !c.OK || strict && should > 0 {
		return errNotConformant
	}
	return nil
}

// listChecks prints the kit's checks.
func listChecks(w io.Writer, asJSON bool) error {
	checks := conformance.Checks()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(checks)
	}
	var b strings.Builder
	for _, c := range checks {
		fmt.Fprintf(&b, "%-6s %-29s %s\n       %s\n", c.Level, c.ID, c.Cites, c.Title)
		if c.Needs != "" {
			fmt.Fprintf(&b, "       needs %s\n", c.Needs)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
