package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/mcpface"
	"github.com/aephost/aep/server/store"
)

// cmdMCP is `aep mcp --stdio`: the host serves one MCP session on
// stdin/stdout, for MCP clients that spawn their servers (docs/mcp.md).
// The shared token comes from the environment (mcp_face.token_env, default
// AEP_AUTH_TOKEN) and is checked by the kernel's handshake, as on every
// transport; without one the command refuses to start.
func cmdMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f := newFlags("mcp", stderr)
	configPath := f.String("config", "", "YAML configuration `FILE` (default: every built-in capability)")
	dataDir := f.String("data-dir", "./aep-data", "`DIR` for the store, the audit log and plugin files")
	stdio := f.Bool("stdio", false, "serve MCP on stdin/stdout (required; over HTTP, `aep serve` offers /mcp)")
	logLevel := f.String("log-level", "warn", "log `LEVEL` (logs go to stderr)")
	if err := parse(f, args); err != nil {
		return err
	}
	if !*stdio || f.NArg() != 0 {
		fmt.Fprintln(stderr, "Usage: aep mcp --stdio [--config FILE] [--data-dir DIR]")
		return errUsage
	}
	cfg, _, err := loadServeConfig(*configPath)
	if err != nil {
		return err
	}
	// The level is the flag's (warn: MCP clients show a server's stderr),
	// the format the file's.
	log, err := newLogger(stderr, cfg.Log, *logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	tokenEnv := cfg.MCPFace.TokenEnv
	if tokenEnv == "" {
		tokenEnv = "AEP_AUTH_TOKEN"
	}
	token := os.Getenv(tokenEnv)
	if token == "" {
		return fmt.Errorf("the shared token is required in $%s", tokenEnv)
	}
	if cfg.Server.AuthToken == "" {
		cfg.Server.AuthToken = os.Getenv("AEP_AUTH_TOKEN")
	}
	if cfg.Server.AuthToken == "" {
		return errors.New("no server.auth_token and no $AEP_AUTH_TOKEN: the host has no token to check")
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	opts := []server.Option{server.WithLogger(log), server.WithDataDir(*dataDir)}
	if cfg.Audit.Enabled == nil || *cfg.Audit.Enabled {
		path := cfg.Audit.Path
		if path == "" {
			path = filepath.Join(*dataDir, "audit.jsonl")
		}
		opts = append(opts, server.WithAuditor(server.NewFileAuditor(path, cfg.Audit.MaxSizeMB, cfg.Audit.MaxBackups, log)))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := store.Open(ctx, cfg.Store.DSN, *dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	h, err := server.New(ctx, cfg, append(opts, server.WithStore(st))...)
	if err != nil {
		return err
	}
	face := mcpface.New(h)
	serveErr := face.ServeStdio(ctx, token, stdin, stdout)
	face.Close()
	closeCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	return errors.Join(serveErr, h.Close(closeCtx))
}
