package configcheck

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestExpandString(t *testing.T) {
	t.Setenv("AEP_X_SET", "v")
	t.Setenv("AEP_X_EMPTY", "")
	tests := []struct {
		in, want string
		missing  []string
	}{
		{"plain", "plain", nil},
		{"${AEP_X_SET}", "v", nil},
		{"a${AEP_X_SET}b${AEP_X_SET}", "avbv", nil},
		{"${AEP_X_UNSET:-d}", "d", nil},
		{"${AEP_X_UNSET:-}", "", nil},
		{"${AEP_X_EMPTY:-d}", "d", nil},
		{"${AEP_X_SET:-d}", "v", nil},
		{"${AEP_X_UNSET}", "", []string{"AEP_X_UNSET"}},
		{"${AEP_X_EMPTY}", "", []string{"AEP_X_EMPTY"}},
		{"x${AEP_X_UNSET}y${AEP_X_EMPTY}", "xy", []string{"AEP_X_UNSET", "AEP_X_EMPTY"}},
		{"$${AEP_X_SET}", "${AEP_X_SET}", nil},
		{"pa$$word$", "pa$$word$", nil},
		{"${not a name}", "${not a name}", nil},
		{"${AEP_X_SET", "${AEP_X_SET", nil},
		{"${}", "${}", nil},
		{"${AEP_X_UNSET:-a:-b}", "a:-b", nil},
	}
	for _, tc := range tests {
		got, missing := expandString(tc.in)
		if got != tc.want || strings.Join(missing, ",") != strings.Join(tc.missing, ",") {
			t.Errorf("expandString(%q) = %q, %v; want %q, %v", tc.in, got, missing, tc.want, tc.missing)
		}
	}
}

// TestExpandNodes: values are expanded where they stand; unquoted ones
// are typed anew, quoted ones stay strings; keys, comments and the text
// of a variable stay what they are; an alias's target is expanded once.
func TestExpandNodes(t *testing.T) {
	t.Setenv("AEP_X_N", "7")
	t.Setenv("AEP_X_EVIL", "x\nplugins: []")
	d, err := Parse("f.yaml", []byte(`# ${AEP_X_UNSET} in a comment
a: ${AEP_X_N}
b: "${AEP_X_N}"
${AEP_X_N}: key
c: ${AEP_X_EVIL}
d: &anchor ${AEP_X_N}
e: *anchor
`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := d.Root.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["a"] != 7 || got["b"] != "7" || got["${AEP_X_N}"] != "key" || got["c"] != "x\nplugins: []" || got["d"] != 7 || got["e"] != 7 {
		t.Errorf("expanded = %#v", got)
	}
	_, err = Parse("f.yaml", []byte("a:\n  b: [x, \"${AEP_X_UNSET}\"]\n"))
	if err == nil || err.Error() != `f.yaml:2: a.b[1]: ${AEP_X_UNSET} is not set (or is empty); set it, or write ${AEP_X_UNSET:-value} to give a default` {
		t.Errorf("unset: %v", err)
	}
}

func TestPlaceAndLine(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte("a:\n  b:\n    - x\n    - c: 1\n"), &root); err != nil {
		t.Fatal(err)
	}
	d := &Document{File: "f.yaml", Root: root.Content[0]}
	for key, want := range map[string]int{"a": 1, "a.b": 2, "a.b[0]": 3, "a.b[1].c": 4, "a.b[1].absent": 4, "zz": 1} {
		if got := d.Line(key); got != want {
			t.Errorf("Line(%q) = %d, want %d", key, got, want)
		}
	}
	err := d.Place(At("a.b[1].c", "bad"))
	if err == nil || err.Error() != "f.yaml:4: a.b[1].c: bad" {
		t.Errorf("Place = %v", err)
	}
	var nilDoc *Document
	if err := nilDoc.Place(At("k", "m")); err == nil || err.Error() != "config: k: m" {
		t.Errorf("Place without a document = %v", err)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"idle_timeout", "max_parallel", "dsn", "priority", "aep.chains.builtin", "aep.env.builtin"}
	for in, want := range map[string]string{
		"idle_timout":       "idle_timeout",
		"max_paralel":       "max_parallel",
		"dns":               "dsn",
		"priorty":           "priority",
		"aep.chains.bultin": "aep.chains.builtin",
		"colour":            "",
		"x":                 "",
	} {
		if got := Suggest(in, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatsAndLoopback(t *testing.T) {
	tests := []struct {
		format, value string
		ok            bool
	}{
		{"listen", "127.0.0.1:8765", true},
		{"listen", ":8765", true},
		{"listen", "[::1]:0", true},
		{"listen", "localhost", false},
		{"listen", "h:99999", false},
		{"listen", "h:http", false},
		{"endpoint", "127.0.0.1:4318", true},
		{"endpoint", "https://otel.example/v1/traces", true},
		{"endpoint", "ftp://x", false},
		{"origin", "*", true},
		{"origin", "https://app.example", true},
		{"origin", "aep.example.com", true},
		{"origin", "https://", false},
		{"origin", "a/b", false},
		{"cidr", "10.0.0.0/8", true},
		{"cidr", "fd00::1", true},
		{"cidr", "10.0.0.0/33", false},
		{"cidr", "ten", false},
		{"glob", "read_*", true},
		{"glob", "[a-", false},
		{"dsn", "postgres://h/db", true},
		{"dsn", "mysql://h/db", false},
	}
	for _, tc := range tests {
		if err := formats[tc.format](tc.value); (err == nil) != tc.ok {
			t.Errorf("%s %q: err %v, want ok %v", tc.format, tc.value, err, tc.ok)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:9464": true, "[::1]:9464": true, "localhost:9464": true, "0.0.0.0:9464": false, ":9464": false, "10.0.0.1:9464": false, "metrics.example:9464": false, "bad": false} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v", addr, got)
		}
	}
}

// TestMergeKeys: keys merged in with << are checked as this mapping's own.
func TestMergeKeys(t *testing.T) {
	err := Check("f.yaml", []byte("x-base: &base\n  listen: nowhere\nserver:\n  <<: *base\n"))
	if err == nil || !strings.Contains(err.Error(), `server.listen: "nowhere": want host:port`) {
		t.Errorf("merged bad listen: %v", err)
	}
}
