// Package pgtest gives tests a PostgreSQL DSN of their own schema, so test
// packages that run at once never migrate the same tables concurrently.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// DSN returns a postgres:// DSN whose search_path is schema, created if
// needed. The server is AEP_TEST_POSTGRES_DSN, or else the postgres user on
// 127.0.0.1:5432 with AEP_TEST_PG_PASSWORD (what .ci/run sets up). Without
// either the test is skipped, unless CI is set: then it fails.
func DSN(t testing.TB, schema string) string {
	t.Helper()
	base := baseDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + url.QueryEscape(schema)
}

// baseDSN is the server's DSN: AEP_TEST_POSTGRES_DSN, or else the
// postgres user on 127.0.0.1:5432 with AEP_TEST_PG_PASSWORD. Without
// either the test is skipped, unless CI is set: then it fails.
func baseDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv("AEP_TEST_POSTGRES_DSN")
	if base == "" {
		if pw := os.Getenv("AEP_TEST_PG_PASSWORD"); pw != "" {
			base = (&url.URL{Scheme: "postgres", User: url.UserPassword("postgres", pw), Host: "127.0.0.1:5432", Path: "/postgres", RawQuery: "sslmode=disable"}).String()
		}
	}
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no PostgreSQL for the test: set AEP_TEST_POSTGRES_DSN or AEP_TEST_PG_PASSWORD")
		}
		t.Skip("no PostgreSQL: AEP_TEST_POSTGRES_DSN and AEP_TEST_PG_PASSWORD are unset (CI unset)")
	}
	return base
}

// Database returns the DSN of a new, empty database of its own on the
// same server as [DSN] (named name and a random suffix), dropped when the
// test ends: for tests that dump and restore a whole database, as an
// operator's backup does (docs/operating.md, Backup and restore).
func Database(t testing.TB, name string) string {
	t.Helper()
	base := baseDSN(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name = fmt.Sprintf("%s_%x", name, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
