// Package docsnippets finds the code snippets of the documentation a
// newcomer follows — the README, the SDK READMEs and docs/*.md — so that a
// test can run each exactly as written. A fenced code block is a snippet;
// one preceded by `<!-- not-run: reason -->` is not run, for that reason.
//
// The tests of this package check that every snippet is either run or
// marked (snippets_test.go, in every `go test ./...`), and run them all
// against real hosts, SDKs and tools (run_test.go, build tag docsnippets,
// its own step of .ci/run).
package docsnippets

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Snippet is one fenced code block of a Markdown file.
type Snippet struct {
	File   string // relative to the repository root, slash-separated
	Line   int    // of the opening fence, from 1
	Lang   string // the fence's info string, "" when none
	Text   string // the block's lines, the fence's indentation removed
	NotRun string // the reason of a not-run marker before the block, or ""
}

func (s Snippet) String() string {
	first, _, _ := strings.Cut(strings.TrimSpace(s.Text), "\n")
	return fmt.Sprintf("%s:%d (%s) %q", s.File, s.Line, s.Lang, first)
}

var (
	fence  = regexp.MustCompile("^( *)(```+)\\s*([A-Za-z0-9_+-]*)\\s*$")
	marker = regexp.MustCompile(`^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$`)
)

// Files returns the Markdown files a newcomer reads, under root: the
// README, the SDKs' READMEs and docs/*.md, sorted within each group.
func Files(root string) ([]string, error) {
	out := []string{"README.md"}
	for _, pattern := range []string{"sdk/*/README.md", "docs/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		sort.Strings(m)
		for _, p := range m {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return nil, err
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out, nil
}

// Parse returns the snippets of the Markdown text src, which is file.
// A fence left open, or a marker without a reason or without a block
// after it, is an error.
func Parse(file string, src []byte) ([]Snippet, error) {
	var out []Snippet
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var (
		open     *Snippet
		indent   int
		ticks    string
		body     []string
		lastText string // the last non-blank line outside a block
		lastLine int
		n        int
	)
	for sc.Scan() {
		n++
		line := sc.Text()
		if open != nil {
			if m := fence.FindStringSubmatch(line); m != nil && m[3] == "" && len(m[2]) >= len(ticks) {
				open.Text = strings.Join(body, "\n") + "\n"
				out = append(out, *open)
				open, body = nil, nil
				lastText, lastLine = "", n
				continue
			}
			body = append(body, strings.TrimPrefix(line, strings.Repeat(" ", min(indent, leadingSpaces(line)))))
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			open = &Snippet{File: file, Line: n, Lang: m[3]}
			indent, ticks = len(m[1]), m[2]
			if mm := marker.FindStringSubmatch(lastText); mm != nil {
				if mm[1] == "" {
					return nil, fmt.Errorf("%s:%d: a not-run marker needs a reason", file, lastLine)
				}
				open.NotRun = mm[1]
			}
			continue
		}
		if strings.TrimSpace(line) != "" {
			if mm := marker.FindStringSubmatch(lastText); mm != nil {
				return nil, fmt.Errorf("%s:%d: a not-run marker must come right before a code block", file, lastLine)
			}
			lastText, lastLine = line, n
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if open != nil {
		return nil, fmt.Errorf("%s:%d: code block never closed", file, open.Line)
	}
	if marker.MatchString(lastText) {
		return nil, fmt.Errorf("%s:%d: a not-run marker must come right before a code block", file, lastLine)
	}
	return out, nil
}

func leadingSpaces(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// All returns every snippet of Files(root).
func All(root string) ([]Snippet, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	var out []Snippet
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		s, err := Parse(f, src)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}
