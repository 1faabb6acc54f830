package toolkits_test

import "github.com/aephost/aep/wire"

func jsonMarshal(v any) ([]byte, error) { return wire.Marshal(v) }
