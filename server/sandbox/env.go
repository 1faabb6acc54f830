package sandbox

import (
	"os"
	"sort"
	"strings"
)

// DefaultEnvAllow are the host variables a contained process inherits by
// default: never a secret (the host's AEP_AUTH_TOKEN, cloud keys, …), only
// what programs need to find binaries and format text. The proc capability
// applies this list (its env_allow setting), and so does every other
// caller of [Environ], so a secret in the host's environment reaches no
// command (docs/SECURITY.md, Isolation).
var DefaultEnvAllow = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM"}

// unsafeEnv are variables that change what a program loads or runs at start,
// refused whatever the allowlist says.
var unsafeEnv = map[string]bool{
	"GCONV_PATH": true, "LOCPATH": true, "NLSPATH": true, "HOSTALIASES": true, "RESOLV_HOST_CONF": true,
	"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PS4": true, "IFS": true, "CDPATH": true,
	"PYTHONSTARTUP": true, "PYTHONPATH": true, "PYTHONHOME": true, "PERL5LIB": true, "PERL5OPT": true,
	"RUBYOPT": true, "RUBYLIB": true, "NODE_OPTIONS": true, "JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true,
	"MALLOC_CHECK_": true, "MALLOC_TRACE": true,
}

// UnsafeEnvName reports whether a variable may never be passed to a
// command: loader variables (LD_*, DYLD_*, GLIBC_TUNABLES), interpreter
// start-up variables, the sandbox's own, and malformed names.
func UnsafeEnvName(n string) bool {
	return strings.HasPrefix(n, "LD_") || strings.HasPrefix(n, "DYLD_") || strings.HasPrefix(n, "GLIBC_TUNABLES") ||
		unsafeEnv[n] || n == initEnv || n == RunMarker || n == "" || strings.ContainsAny(n, "=\x00")
}

// Environ builds a command's environment: the host variables named in
// allow (nil: [DefaultEnvAllow]), HOME set to home when not empty, then
// extra; unsafe names are left out and those of extra listed in dropped.
// PATH falls back to [DefaultPath]. The result is sorted.
func Environ(allow []string, home string, extra map[string]string) (env []string, dropped []string) {
	if allow == nil {
		allow = DefaultEnvAllow
	}
	vals := map[string]string{}
	for _, n := range allow {
		if v, ok := os.LookupEnv(n); ok && !UnsafeEnvName(n) {
			vals[n] = v
		}
	}
	if home != "" {
		vals["HOME"] = home
	}
	for n, v := range extra {
		if UnsafeEnvName(n) || strings.ContainsRune(v, 0) {
			dropped = append(dropped, n)
			continue
		}
		vals[n] = v
	}
	if _, ok := vals["PATH"]; !ok {
		vals["PATH"] = strings.TrimPrefix(DefaultPath, "PATH=")
	}
	for n, v := range vals {
		env = append(env, n+"="+v)
	}
	sort.Strings(env)
	sort.Strings(dropped)
	return env, dropped
}
