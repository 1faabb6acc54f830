package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/aephost/aep/wire"
)

// The capability names an error may carry (schemas/core.json
// CapabilityName) are exactly the protocol's: the capabilities of the
// generated registry, and session. An error of a module's own capability
// carries none, since the contract does not know it.
func TestCapabilityNamesAreTheContracts(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "schemas", "core.json"))
	if err != nil {
		t.Fatal(err)
	}
	var core struct {
		Defs struct {
			CapabilityName struct {
				Enum []string `json:"enum"`
			} `json:"CapabilityName"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &core); err != nil {
		t.Fatal(err)
	}
	var have []string
	for c := range contractCapabilities() {
		have = append(have, c)
	}
	want := slices.Clone(core.Defs.CapabilityName.Enum)
	sort.Strings(have)
	sort.Strings(want)
	if !slices.Equal(have, want) {
		t.Fatalf("core.json CapabilityName lists %v; the registry's capabilities and session are %v", want, have)
	}
	for _, tc := range []struct {
		capability string
		named      bool
	}{{"tools", true}, {"session", true}, {"echo", false}, {"", false}} {
		m := errorMessage(&wire.Error{Code: wire.CodeCapabilityMissing, Capability: tc.capability, Message: "m"})
		if got := m.CapabilityName != nil; got != tc.named {
			t.Errorf("capability %q: capability_name set %v, want %v", tc.capability, got, tc.named)
		}
	}
}
