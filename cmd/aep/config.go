package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
)

// storeReachTimeout bounds validate's attempt to reach the store.
const storeReachTimeout = 10 * time.Second

func cmdConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "hash-secret" {
		return cmdHashSecret(args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) == 0 || args[0] != "validate" {
		fmt.Fprintln(stderr, "Usage: aep config validate [--data-dir DIR] FILE\n       aep config hash-secret < SECRET")
		return errUsage
	}
	f := newFlags("config validate", stderr)
	dataDir := f.String("data-dir", "./aep-data", "`DIR` `aep serve` would use, where a SQLite store's relative path is")
	f.Usage = func() {
		fmt.Fprint(stderr, "Usage: aep config validate [--data-dir DIR] FILE\n\nMakes every check `aep serve` makes before it starts anything, and reports each mistake as FILE:LINE: dotted.key: message: YAML syntax, ${NAME} references to unset variables, every section against its schema (schemas/config/kernel.json; types, ranges, allowed values, durations, unknown keys), each plugin's settings against its module's schema, the store DSN, the operator token, that every cls names a module built into this binary and serves its type. A store that cannot be reached is a warning here (exit 0) and an error at `aep serve`.\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args[1:]); err != nil {
		return err
	}
	if f.NArg() != 1 {
		f.Usage()
		return errUsage
	}
	cfg, doc, err := loadServeConfig(f.Arg(0))
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, storeReachTimeout)
	defer cancel()
	if err := store.Reach(rctx, cfg.Store.DSN, *dataDir); err != nil {
		w := doc.Place(configcheck.At("store.dsn", "cannot reach the store (aep serve would refuse to start): %v", err))
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	fmt.Fprintf(stdout, "%s: ok (%d plugins)\n", f.Arg(0), len(cfg.Plugins))
	return nil
}

// cmdHashSecret prints the SHA-256 of the secret on standard input (its
// first line, without the line's end), for a tenant's secret_sha256: the
// configuration never holds the secret itself.
func cmdHashSecret(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "Usage: aep config hash-secret < SECRET")
		return errUsage
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 64<<10)).ReadString('\n')
	if err != nil && err != io.EOF {
		return err
	}
	secret := strings.TrimRight(line, "\r\n")
	if len(secret) < server.MinSecretBytes {
		return fmt.Errorf("a secret of %d bytes is too short: at least %d", len(secret), server.MinSecretBytes)
	}
	sum := sha256.Sum256([]byte(secret))
	fmt.Fprintln(stdout, hex.EncodeToString(sum[:]))
	return nil
}
