// Command tsgen writes the TypeScript SDK's message types
// (sdk/typescript/src/messages.gen.ts) from the contract: every $def of
// gen/contract/aep.schema.json becomes a type, the unions AgentMessage and
// HostMessage become discriminated unions on `type`, and the request table
// (each request's reply and event type, from the operations of
// gen/contract/asyncapi.yaml) becomes a type map and one typed method per
// request. It needs only Go; see README.md for the mapping rules.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aephost/aep/tools/internal/sdkform"
)

func main() {
	contract := flag.String("contract", "gen/contract", "directory holding aep.schema.json and asyncapi.yaml")
	out := flag.String("out", "sdk/typescript/src/messages.gen.ts", "output file")
	flag.Parse()
	if err := run(*contract, *out); err != nil {
		fmt.Fprintln(os.Stderr, "tsgen:", err)
		os.Exit(1)
	}
}

func run(contractDir, out string) error {
	bundle, err := os.ReadFile(filepath.Join(contractDir, "aep.schema.json"))
	if err != nil {
		return fmt.Errorf("read bundle: %w", err)
	}
	asyncapi, err := os.ReadFile(filepath.Join(contractDir, "asyncapi.yaml"))
	if err != nil {
		return fmt.Errorf("read asyncapi: %w", err)
	}
	src, err := generate(bundle, asyncapi)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, src, 0o644)
}

// generate returns the TypeScript source for a bundle and its AsyncAPI
// document (both as gen/contract holds them).
func generate(bundle, asyncapi []byte) ([]byte, error) {
	form, err := sdkform.ForSDK(bundle)
	if err != nil {
		return nil, err
	}
	var root schema
	if err := json.Unmarshal(form, &root); err != nil {
		return nil, fmt.Errorf("parse bundle: %w", err)
	}
	reqs, err := requestTable(asyncapi)
	if err != nil {
		return nil, err
	}
	e := &emitter{defs: root.Defs}
	e.header(digest(bundle), digest(asyncapi))
	if err := e.all(reqs); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
