package tools_test

import (
	"testing"

	"github.com/aephost/aep/wire"
)

func encode(t testing.TB, v any) string {
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
