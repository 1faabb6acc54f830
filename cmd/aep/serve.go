package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/internal/version"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
)

// serveHTTP runs the HTTP+SSE transport until ctx is done; http.go links it
// in. A build without it refuses to serve HTTP instead of pretending to.
var serveHTTP func(ctx context.Context, h *server.Host, listen string) error

// serveOperator runs the operator endpoint (/metrics and the admin API)
// until ctx is done; http.go links it in.
var serveOperator func(ctx context.Context, h *server.Host, listen string, o operatorOptions) error

// operatorOptions say how the operator endpoint serves (see
// httpapi.OperatorOptions).
type operatorOptions struct {
	token    string
	reload   func(context.Context) error // nil: no configuration file
	stopping <-chan struct{}
	log      *slog.Logger
}

// drainLinger is how long the transports keep serving after a drain
// finished, so replies already queued reach their readers (an SSE stream,
// a POST /send waiting for its answer) before the listeners close.
const drainLinger = 500 * time.Millisecond

// shutdownGrace bounds how long closing the host may take on exit.
const shutdownGrace = 10 * time.Second

func cmdServe(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f := newFlags("serve", stderr)
	configPath := f.String("config", "", "YAML configuration `FILE` (default: every built-in capability, the default limits)")
	listen := f.String("listen", "127.0.0.1:8765", "HTTP listen `ADDR` (overrides server.listen)")
	dataDir := f.String("data-dir", "./aep-data", "`DIR` for the store, the audit log and plugin files")
	stdio := f.Bool("stdio", false, "serve one session as NDJSON on stdin/stdout instead of HTTP")
	logLevel := f.String("log-level", "info", "log `LEVEL`: debug, info, warn or error (logs go to stderr); overrides log.level")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep serve [flags]\n\nRuns the host. The auth token is server.auth_token, else $AEP_AUTH_TOKEN, else generated and printed once to stderr.\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args); err != nil {
		return err
	}
	if f.NArg() != 0 {
		f.Usage()
		return errUsage
	}
	cfg, doc, err := loadServeConfig(*configPath)
	if err != nil {
		return err
	}
	level := cfg.Log.Level
	if flagSet(f, "log-level") {
		level = *logLevel
	}
	// Logs go to stderr only: in --stdio mode stdout carries the protocol.
	log, err := newLogger(stderr, cfg.Log, level)
	if err != nil {
		if flagSet(f, "log-level") {
			return fmt.Errorf("--log-level: %w", err)
		}
		return err
	}
	if flagSet(f, "listen") || cfg.Server.Listen == "" {
		cfg.Server.Listen = *listen
	}
	useStdio := *stdio || cfg.Transport.Type == "stdio"
	if !useStdio && serveHTTP == nil {
		return errors.New("HTTP transport not built yet; use --stdio")
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	switch {
	case cfg.Server.AuthToken != "":
	case os.Getenv("AEP_AUTH_TOKEN") != "":
		cfg.Server.AuthToken = os.Getenv("AEP_AUTH_TOKEN")
	case len(cfg.Server.Tenants) > 0:
		// Tenants alone: no implicit default tenant.
	default:
		// Printed once, to stderr and never to the log handler, so the
		// secret is not repeated in structured logs (docs/DECISIONS.md, Plugins and
		// configuration).
		cfg.Server.AuthToken = server.GenerateToken()
		fmt.Fprintf(stderr, "aep: no auth token configured; generated one for this run:\n\n    AEP_AUTH_TOKEN=%s\n\n", cfg.Server.AuthToken)
	}

	opts := []server.Option{server.WithLogger(log), server.WithDataDir(*dataDir)}
	var auditor *server.FileAuditor
	if cfg.Audit.Enabled == nil || *cfg.Audit.Enabled {
		path := cfg.Audit.Path
		if path == "" {
			path = filepath.Join(*dataDir, "audit.jsonl")
		}
		auditor = server.NewFileAuditor(path, cfg.Audit.MaxSizeMB, cfg.Audit.MaxBackups, log)
		opts = append(opts, server.WithAuditor(auditor))
		log.Info("audit on", "path", path)
	} else {
		log.Warn("audit off (audit.enabled: false)")
	}

	instanceID := newInstanceID()
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = sigCtx
	if ep := cfg.Operator.OTLPEndpoint; ep != "" {
		// Both loadServeConfig's paths fill the default host id.
		tp, err := newTracerProvider(ctx, ep, traceResource(cfg.Server.HostID, instanceID))
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx) // flushes the spans still batched
		}()
		// The exporter's failures (a collector down) go to the host's log,
		// in its format, not to the standard library's logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("trace export failed", "err", err) }))
		opts = append(opts, server.WithTracerProvider(tp))
		log.Info("traces exported over OTLP/HTTP", "endpoint", ep, "instance_id", instanceID, "host_id", cfg.Server.HostID)
	}
	// The shared store: SQLite at <data-dir>/aep.db unless store.dsn says
	// otherwise (docs/DECISIONS.md, State). It outlives the host, which may use it while
	// closing.
	st, err := store.Open(ctx, cfg.Store.DSN, *dataDir)
	if err != nil {
		// What `aep config validate` warns of (store.Reach), an error here.
		return doc.Place(configcheck.At("store.dsn", "cannot open the store: %v", err))
	}
	defer st.Close()
	log.Info("store open", "path", st.Path())
	opts = append(opts, server.WithStore(st))
	h, err := server.New(ctx, cfg, opts...)
	if err != nil {
		if auditor != nil {
			// A host that never started owns nothing; close the file here.
			cctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			_ = auditor.Close(cctx)
		}
		return err
	}
	v := version.Get()
	log.Info("host started", "version", v.Version, "commit", v.Commit, "host_id", h.Config().Server.HostID, "instance_id", instanceID,
		"plugins", strings.Join(h.Plugins(), ","), "capabilities", strings.Join(h.Served(), ","), "data_dir", *dataDir,
		"tenants", strings.Join(h.TenantNames(), ","))
	// SIGHUP and the admin API's reload both reload the tenants of the
	// configuration file (its other settings need a restart): a secret
	// added is accepted and one removed refused at once, with no restart.
	var reload func(context.Context) error
	if *configPath != "" {
		reload = tenantReloader(h, *configPath, cfg.Server.AuthToken)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for range hup {
				if err := reload(context.Background()); err != nil {
					log.Error("SIGHUP: tenants not reloaded; the running ones stay", "err", err)
				}
			}
		}()
	}

	// The transports outlive the signal: on SIGTERM the host drains first
	// (no new sessions, requests in flight finish, live sessions are
	// snapshotted when configured), and only then do the listeners close
	// (docs/operating.md, Drain).
	serveCtx, endServe := context.WithCancel(context.WithoutCancel(ctx))
	defer endServe()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		drain(h, cfg.Operator, log)
		endServe()
	}()
	// An operator endpoint that cannot serve (its address taken, say)
	// stops the host: the operator asked for /metrics and would otherwise
	// watch a host that reports nothing.
	var opErr error
	opDone := make(chan struct{})
	if cfg.Operator.Listen != "" {
		if serveOperator == nil {
			return errors.New("operator endpoint not built; unset operator.listen")
		}
		go func() {
			defer close(opDone)
			o := operatorOptions{token: cfg.Operator.Token, reload: reload, stopping: ctx.Done(), log: log}
			if err := serveOperator(serveCtx, h, cfg.Operator.Listen, o); err != nil && serveCtx.Err() == nil {
				log.Error("operator endpoint stopped; stopping the host", "err", err)
				opErr = err
				endServe()
			}
		}()
	} else {
		close(opDone)
	}
	var serveErr error
	if useStdio {
		serveErr = server.ServeStdio(serveCtx, h, stdin, stdout)
	} else {
		log.Info("listening", "addr", cfg.Server.Listen)
		serveErr = serveHTTP(serveCtx, h, cfg.Server.Listen)
	}
	if ctx.Err() != nil {
		<-drained
	}
	// Closing the host ends every session, cleans up the plugins and flushes
	// the audit log; it stops nothing outside this process.
	closeCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	closeErr := h.Close(closeCtx)
	if ctx.Err() != nil {
		log.Info("stopped by signal")
	}
	if errors.Is(serveErr, context.Canceled) {
		serveErr = nil
	}
	endServe()
	<-opDone
	return errors.Join(opErr, serveErr, closeErr)
}

// tenantReloader returns the reload of the tenants of the configuration
// file at path, as SIGHUP and POST /admin/reload make it: the file is read
// and checked again as at start-up, and its tenants applied
// (server.Host.ReloadTenants); server.auth_token stays the one the host
// started with. A file that fails its checks changes nothing. Reloads run
// one at a time.
func tenantReloader(h *server.Host, path, startToken string) func(context.Context) error {
	var mu sync.Mutex
	return func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		next, _, err := loadServeConfig(path)
		if err != nil {
			return err
		}
		next.Server.AuthToken = startToken // the default tenant's, as started
		return h.ReloadTenants(next)
	}
}

// loadServeConfig reads path, or builds the default configuration when
// path is empty, and makes every check `aep serve` makes before it starts
// anything (server.ParseConfigFile, then server.CheckConfig), each
// problem with its file, line and dotted key. `aep config validate`,
// `aep serve` and `aep mcp` all load their configuration here, so they
// refuse the same files with the same messages. A file without a
// `plugins` list gets the default plugins, so a config that only sets,
// say, the store keeps every capability; an explicit `plugins: []` loads
// none. The document is nil without a file.
func loadServeConfig(path string) (server.Config, *configcheck.Document, error) {
	if path == "" {
		cfg := defaultConfig()
		return cfg, nil, server.CheckConfig(cfg, msg.Registry())
	}
	cfg, doc, err := server.LoadConfigFile(path)
	if err != nil {
		return server.Config{}, nil, err
	}
	if cfg.Plugins == nil {
		cfg.Plugins = defaultPlugins()
	}
	if err := server.CheckConfig(cfg, msg.Registry()); err != nil {
		return server.Config{}, nil, doc.Place(err)
	}
	return cfg, doc, nil
}

// defaultConfig is the configuration for `aep serve` without --config:
// the default limits with the default plugins.
func defaultConfig() server.Config {
	// An empty document takes every default, the host id's included, as
	// a file that sets nothing would.
	cfg, err := server.ParseConfig(nil)
	if err != nil {
		panic(fmt.Sprintf("the empty configuration is refused: %v", err)) // a defaults bug
	}
	cfg.Plugins = defaultPlugins()
	return cfg
}

// defaultPlugins has one plugin for every module that names itself part of
// the default configuration (server.ModuleInfo.DefaultName), configured
// as the capability the module says it serves.
func defaultPlugins() []server.PluginConfig {
	var out []server.PluginConfig
	for _, m := range server.Modules() {
		if m.DefaultName == "" {
			continue // test or third-party modules are opted into by config only
		}
		out = append(out, server.PluginConfig{Name: m.DefaultName, Type: m.Capability, Cls: m.ID})
	}
	return out
}

func flagSet(f *flag.FlagSet, name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// drain runs the host's drain after a signal: bounded by
// operator.drain_timeout (default 30s), then a short linger for replies.
func drain(h *server.Host, op server.OperatorConfig, log *slog.Logger) {
	timeout := time.Duration(op.DrainTimeout)
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	log.Info("draining: no new sessions; waiting for requests in flight", "timeout", timeout)
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := h.Drain(dctx, op.SnapshotOnDrain)
	if err != nil {
		log.Error("drain", "err", err)
	}
	if res.Unfinished > 0 {
		log.Warn("drain timed out; requests still in flight are cut off", "unfinished", res.Unfinished)
	}
	log.Info("drained", "snapshots", len(res.Snapshots), "sessions_not_saved", res.NotSaved, "took", res.Took)
	time.Sleep(drainLinger)
}
