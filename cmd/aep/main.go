// Command aep is the aep host: it serves the Agent-Environment Protocol over
// HTTP+SSE or stdio, validates configurations and prints the protocol's
// schemas. Run `aep help` for the subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	_ "github.com/aephost/aep/capabilities/all" // every built-in capability registers its modules
)

const usage = `aep — a host for the Agent-Environment Protocol

Usage:
  aep serve [--config FILE] [--listen ADDR] [--data-dir DIR] [--stdio]
  aep mcp --stdio [--config FILE] [--data-dir DIR]
  aep config validate [--data-dir DIR] FILE
  aep schema [--sources | --asyncapi | --out DIR] [NAME...]
  aep conformance (--url URL | --stdio CMD) [--token TOKEN] [--json]
  aep export trajectories --session HANDLE [--format jsonl|chat] [--data-dir DIR]
  aep admin list|inspect|terminate|snapshot|drain|undrain|reload|open [--addr ADDR] [--json]
  aep version

Run "aep <command> -h" for a command's flags.
`

// errUsage marks errors already explained by a usage message (exit code 2).
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit code: 0 success,
// 1 failure, 2 bad usage. Only the protocol (in --stdio mode) or a command's
// requested output is written to stdout; everything else goes to stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = cmdServe(ctx, args[1:], stdin, stdout, stderr)
	case "mcp":
		err = cmdMCP(ctx, args[1:], stdin, stdout, stderr)
	case "config":
		err = cmdConfig(ctx, args[1:], stdout, stderr)
	case "schema":
		err = cmdSchema(args[1:], stdout, stderr)
	case "conformance":
		err = cmdConformance(ctx, args[1:], stdout, stderr)
	case "export":
		err = cmdExport(ctx, args[1:], stdout, stderr)
	case "admin":
		err = cmdAdmin(ctx, args[1:], stdout, stderr)
	case "version":
		err = cmdVersion(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "aep: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "aep %s: %v\n", args[0], err)
		return 1
	}
}

// newFlags returns a flag set that reports its errors on stderr and leaves
// the exit to run.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("aep "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args, turning flag errors into errUsage (already printed).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
