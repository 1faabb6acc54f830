package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	admin "github.com/aephost/aep/gen/adminapi"
)

// `aep admin`: the admin API (docs/operating.md, Admin API) from the
// command line, through the client generated from openapi.yaml. The
// operator token comes from the environment only, never from a flag (a
// flag shows in the process table).

const adminUsage = `Usage: aep admin COMMAND [flags] [ARGS]

Acts on a running host through its admin API, on the operator listener
(operator.listen). The operator token is read from AEP_OPERATOR_TOKEN; the
address from --addr, else AEP_OPERATOR_ADDR.

Commands:
  list                     the sessions: handle, tenant, agent, state, transport, age, budgets used, newest snapshot
  inspect HANDLE           one session, with its stored snapshots
  terminate HANDLE         end one session now (its processes and subagents too)
  snapshot HANDLE          snapshot one session; prints the id session/restore takes
  drain                    no new sessions; with snapshots, seal, snapshot and end the sessions so they move
  undrain                  take new sessions again
  reload                   reload the tenants from the configuration file, as SIGHUP does
  open --tenant NAME       open a session for a tenant; prints its session id and the token its handshake takes

Every command takes --addr ADDR, --json (the API's answer as JSON) and
--timeout D. Run "aep admin COMMAND -h" for a command's own flags.
`

// adminCmd is one parsed `aep admin` command line.
type adminCmd struct {
	name    string
	addr    *string
	asJSON  *bool
	timeout *time.Duration
	fs      *flag.FlagSet
	args    []string // the arguments that are not flags
	stdout  io.Writer
}

// parseInterleaved parses flags wherever they stand among the arguments
// (aep admin inspect h-… --json), returning the other arguments in order;
// "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func cmdAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, adminUsage)
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	name := args[0]
	c := &adminCmd{name: name, fs: newFlags("admin "+name, stderr), stdout: stdout}
	c.addr = c.fs.String("addr", os.Getenv("AEP_OPERATOR_ADDR"), "the operator listener, `host:port` or an http(s):// URL (default $AEP_OPERATOR_ADDR)")
	c.asJSON = c.fs.Bool("json", false, "print the API's answer as JSON")
	defTimeout := 30 * time.Second
	if name == "drain" {
		defTimeout = 10 * time.Minute // a drain answers when it is done
	}
	c.timeout = c.fs.Duration("timeout", defTimeout, "how long to wait for the answer")
	var run func(context.Context, *admin.ClientWithResponses) error
	switch name {
	case "list":
		limit := c.fs.Int("limit", 1000, "at most `N` sessions")
		run = func(ctx context.Context, cl *admin.ClientWithResponses) error { return c.list(ctx, cl, *limit) }
	case "inspect", "terminate":
		run = func(ctx context.Context, cl *admin.ClientWithResponses) error { return c.oneSession(ctx, cl) }
	case "snapshot":
		target := c.fs.String("target", "", "`file` or sql (default: sql when the host has a store)")
		run = func(ctx context.Context, cl *admin.ClientWithResponses) error { return c.snapshot(ctx, cl, *target) }
	case "drain":
		snap := c.fs.String("snapshot", "", "`true` or false: seal, snapshot and end the sessions so they move (default operator.snapshot_on_drain)")
		wait := c.fs.String("drain-timeout", "", "how long the host waits for requests in flight, a `duration` (default operator.drain_timeout)")
		run = func(ctx context.Context, cl *admin.ClientWithResponses) error { return c.drain(ctx, cl, *snap, *wait) }
	case "undrain":
		run = c.undrain
	case "reload":
		run = c.reload
	case "open":
		tenant := c.fs.String("tenant", "", "the tenant the session is for (default: server.auth_token's, \"default\")")
		caps := c.fs.String("caps", "", "comma-separated `capabilities` narrowing the tenant's (default: the tenant's)")
		run = func(ctx context.Context, cl *admin.ClientWithResponses) error { return c.open(ctx, cl, *tenant, *caps) }
	default:
		fmt.Fprintf(stderr, "aep admin: unknown command %q\n\n%s", name, adminUsage)
		return errUsage
	}
	pos, err := parseInterleaved(c.fs, args[1:])
	if err != nil {
		return err
	}
	wantArgs := 0
	if name == "inspect" || name == "terminate" || name == "snapshot" {
		wantArgs = 1
	}
	c.args = pos
	if len(pos) != wantArgs {
		if wantArgs == 1 {
			fmt.Fprintf(stderr, "aep admin %s: give one session handle (h-…, as aep admin list shows)\n", name)
		} else {
			fmt.Fprintf(stderr, "aep admin %s: takes no arguments\n", name)
		}
		return errUsage
	}
	cl, err := newAdminClient(*c.addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	return run(ctx, cl)
}

// newAdminClient is the generated client of the admin API at addr, with
// the token of AEP_OPERATOR_TOKEN on every request.
func newAdminClient(addr string) (*admin.ClientWithResponses, error) {
	if addr == "" {
		return nil, errors.New("no address: give --addr or set AEP_OPERATOR_ADDR (the host's operator.listen, e.g. 127.0.0.1:9464)")
	}
	token := os.Getenv("AEP_OPERATOR_TOKEN")
	if token == "" {
		return nil, errors.New("AEP_OPERATOR_TOKEN is not set: the admin API always needs the operator token (the host's operator.token)")
	}
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return admin.NewClientWithResponses(base, admin.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
}

// answer is what every generated response has.
type answer interface {
	StatusCode() int
	GetBody() []byte
}

// check turns a response that is not the one wanted into an error with the
// API's message.
func check(res answer, want int, err error) error {
	if err != nil {
		return fmt.Errorf("the admin API did not answer: %w", err)
	}
	if res.StatusCode() == want {
		return nil
	}
	var e admin.Error
	if json.Unmarshal(res.GetBody(), &e) == nil && e.Message != "" {
		return fmt.Errorf("%d %s: %s", res.StatusCode(), e.Error, e.Message)
	}
	return fmt.Errorf("the admin API answered %d: %s", res.StatusCode(), strings.TrimSpace(string(res.GetBody())))
}

// printJSON prints the API's answer as it came, indented.
func (c *adminCmd) printJSON(body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

func (c *adminCmd) list(ctx context.Context, cl *admin.ClientWithResponses, limit int) error {
	res, err := cl.AdminListSessionsWithResponse(ctx, &admin.AdminListSessionsParams{Limit: &limit})
	if err := check(res, http.StatusOK, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	l := res.JSON200
	state := "ready"
	if l.Draining {
		state = "draining"
	}
	fmt.Fprintf(c.stdout, "host %s: %d sessions (%d shown), %d waiting for their handshake\n", state, l.Total, len(l.Sessions), l.Pending)
	if len(l.Sessions) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "HANDLE\tTENANT\tAGENT\tSTATE\tTRANSPORT\tAGE\tIDLE\tIN FLIGHT\tLEAF WORK\tDISK\tFILES\tMEMORY\tNEWEST SNAPSHOT")
	for _, s := range l.Sessions {
		leaf, disk, files, mem := "-", "-", "-", "-"
		if b := s.Budgets; b != nil {
			leaf = fmt.Sprintf("%d/%d", b.LeafWork.Used, b.LeafWork.Limit)
			disk = bytesUse(b.DiskBytes)
			files = fmt.Sprintf("%d/%d", b.Files.Used, b.Files.Limit)
			mem = bytesUse(b.WorkingMemoryBytes)
		}
		agent := dash(s.AgentId)
		if s.OperatorOpened {
			agent += " (operator)"
		}
		if s.ParentHandle != nil {
			agent += " ← " + *s.ParentHandle
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Handle, dash(s.Tenant), agent, s.State, s.Transport,
			seconds(s.AgeSeconds), seconds(s.IdleSeconds), s.InFlight, leaf, disk, files, mem, snapRef(s.NewestSnapshot))
	}
	return w.Flush()
}

func (c *adminCmd) oneSession(ctx context.Context, cl *admin.ClientWithResponses) error {
	handle := c.args[0]
	if c.name == "terminate" {
		res, err := cl.AdminTerminateSessionWithResponse(ctx, handle)
		if err := check(res, http.StatusOK, err); err != nil {
			return err
		}
		if *c.asJSON {
			return c.printJSON(res.Body)
		}
		s := res.JSON200
		_, err = fmt.Fprintf(c.stdout, "terminated %s (tenant %s, agent %s, %s)\n", s.Handle, dash(s.Tenant), dash(s.AgentId), s.Transport)
		return err
	}
	res, err := cl.AdminInspectSessionWithResponse(ctx, handle)
	if err := check(res, http.StatusOK, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	d := res.JSON200
	s := d.Session
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("handle", s.Handle)
	row("tenant", dash(s.Tenant))
	row("agent", dash(s.AgentId))
	row("state", string(s.State))
	row("transport", s.Transport)
	row("created", s.Created.Format(time.RFC3339)+" ("+seconds(s.AgeSeconds)+" ago)")
	row("idle", seconds(s.IdleSeconds))
	row("in flight", fmt.Sprint(s.InFlight))
	row("operator opened", yesNo(s.OperatorOpened))
	if s.ParentHandle != nil {
		row("parent", *s.ParentHandle)
	}
	row("capabilities", dash(strings.Join(s.Capabilities, ", ")))
	if b := s.Budgets; b != nil {
		row("leaf work", fmt.Sprintf("%d of %d", b.LeafWork.Used, b.LeafWork.Limit))
		row("sandbox memory", bytesUse(b.SandboxMemoryBytes))
		row("disk", bytesUse(b.DiskBytes))
		row("files", fmt.Sprintf("%d of %d", b.Files.Used, b.Files.Limit))
		row("working memory", bytesUse(b.WorkingMemoryBytes))
		row("persistent memory", bytesUse(b.PersistentMemoryBytes))
		if b.Steps != nil {
			row("steps", fmt.Sprintf("%d of %d", b.Steps.Used, b.Steps.Limit))
		}
	}
	row("newest snapshot", snapRef(s.NewestSnapshot))
	if err := w.Flush(); err != nil {
		return err
	}
	if d.SnapshotsError != nil {
		fmt.Fprintf(c.stdout, "\nstored snapshots: not listed: %s\n", *d.SnapshotsError)
		return nil
	}
	fmt.Fprintf(c.stdout, "\nstored snapshots: %d\n", len(d.Snapshots))
	if len(d.Snapshots) == 0 {
		return nil
	}
	w = tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SNAPSHOT\tTARGET\tKIND\tCREATED\tBYTES")
	for _, n := range d.Snapshots {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", n.SnapshotId, n.Target, n.Kind, n.Created.Format(time.RFC3339), n.Bytes)
	}
	return w.Flush()
}

func (c *adminCmd) snapshot(ctx context.Context, cl *admin.ClientWithResponses, target string) error {
	body := admin.AdminSnapshotRequest{}
	if target != "" {
		t := admin.AdminSnapshotRequestTarget(target)
		body.Target = &t
	}
	res, err := cl.AdminSnapshotSessionWithResponse(ctx, c.args[0], body)
	if err := check(res, http.StatusOK, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	s := res.JSON200
	_, err = fmt.Fprintf(c.stdout, "%s\n(target %s, %d bytes, files %s; session/restore/req {\"snapshot_id\": %q} restores it)\n", s.SnapshotId, s.Target, s.Bytes, s.Files, s.SnapshotId)
	return err
}

func (c *adminCmd) drain(ctx context.Context, cl *admin.ClientWithResponses, snap, wait string) error {
	body := admin.AdminDrainRequest{}
	switch snap {
	case "":
	case "true", "false":
		v := snap == "true"
		body.Snapshot = &v
	default:
		return fmt.Errorf("--snapshot %q: want true or false", snap)
	}
	if wait != "" {
		body.Timeout = &wait
	}
	res, err := cl.AdminDrainWithResponse(ctx, body)
	if err := check(res, http.StatusOK, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	d := res.JSON200
	if d.Snapshot {
		fmt.Fprintf(c.stdout, "drained in %.1fs: %d sessions snapshotted and ended (their clients move), %d left without a snapshot, %d requests cut off at the timeout\n",
			d.TookSeconds, d.Ended, d.NotSaved, d.Unfinished)
	} else {
		fmt.Fprintf(c.stdout, "draining (no snapshots): no new sessions; %d open sessions go on, %d requests still in flight after %.1fs\n",
			d.NotSaved, d.Unfinished, d.TookSeconds)
	}
	sort.Slice(d.Snapshots, func(i, j int) bool { return d.Snapshots[i].Handle < d.Snapshots[j].Handle })
	for _, s := range d.Snapshots {
		fmt.Fprintf(c.stdout, "  %s  %s\n", s.Handle, s.SnapshotId)
	}
	if d.Error != nil {
		return fmt.Errorf("some sessions were not saved: %s", *d.Error)
	}
	return nil
}

func (c *adminCmd) undrain(ctx context.Context, cl *admin.ClientWithResponses) error {
	res, err := cl.AdminUndrainWithResponse(ctx)
	if err := check(res, http.StatusOK, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	if res.JSON200.WasDraining {
		_, err = fmt.Fprintln(c.stdout, "undrained: the host takes new sessions again")
	} else {
		_, err = fmt.Fprintln(c.stdout, "the host was not draining; it takes new sessions")
	}
	return err
}

func (c *adminCmd) reload(ctx context.Context, cl *admin.ClientWithResponses) error {
	res, err := cl.AdminReloadWithResponse(ctx)
	if err := check(res, http.StatusOK, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	_, err = fmt.Fprintf(c.stdout, "tenants reloaded: %s\n", strings.Join(res.JSON200.Tenants, ", "))
	return err
}

func (c *adminCmd) open(ctx context.Context, cl *admin.ClientWithResponses, tenant, caps string) error {
	if tenant == "" {
		tenant = "default"
	}
	body := admin.AdminOpenSessionRequest{Tenant: tenant}
	if caps != "" {
		list := strings.Split(caps, ",")
		for i := range list {
			list[i] = strings.TrimSpace(list[i])
		}
		body.Capabilities = &list
	}
	res, err := cl.AdminOpenSessionWithResponse(ctx, body)
	if err := check(res, http.StatusCreated, err); err != nil {
		return err
	}
	if *c.asJSON {
		return c.printJSON(res.Body)
	}
	o := res.JSON201
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "session_id\t%s\n", o.SessionId)
	fmt.Fprintf(w, "token\t%s\n", o.Token)
	fmt.Fprintf(w, "handle\t%s\n", o.Handle)
	fmt.Fprintf(w, "tenant\t%s\n", o.Tenant)
	fmt.Fprintf(w, "handshake by\t%s\n", o.Expires.Format(time.RFC3339))
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// seconds prints a duration in seconds the way people read one.
func seconds(s float32) string {
	return (time.Duration(float64(s)*float64(time.Second)) / time.Second * time.Second).String()
}

// bytesUse prints a byte budget as used/limit in binary units.
func bytesUse(b admin.BudgetUse) string { return humanBytes(b.Used) + "/" + humanBytes(b.Limit) }

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func snapRef(r *admin.AdminSnapshotRef) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%s, %s ago)", r.SnapshotId, r.Kind, time.Since(r.Created).Truncate(time.Second))
}
