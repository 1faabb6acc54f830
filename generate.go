// Package aep is the root of the aep host: a Go host for the
// Agent-Environment Protocol. This file holds the project's go:generate
// lines; the generators are pinned in go.mod.
package aep

//go:generate go run ./tools/aepgen -schemas schemas -out gen/msg -pkg msg -codes wire/codes.gen.go -envelope wire/envelope.gen.go -docs docs/protocol.md
//go:generate go run ./tools/aepgen -schemas schemas/envproto -out gen/envproto -pkg envproto
//go:generate go run ./tools/aepcontract -schemas schemas -out gen/contract
//go:generate go run ./tools/tsgen -contract gen/contract -out sdk/typescript/src/messages.gen.ts
//go:generate go run ./tools/pygen -bundle gen/contract/aep.schema.json -out sdk/python/aep
//go:generate go tool oapi-codegen -config httpapi.cfg.yaml openapi.yaml
//go:generate go tool oapi-codegen -config adminapi.cfg.yaml openapi.yaml
//go:generate go run ./tools/retrygen -table schemas/errors/retryable.json -codes schemas/core.json -out wire/retryable.gen.go
//go:generate go run ./tools/configgen -schemas schemas/config -root . -docs docs/config.md
//go:generate go run ./tools/proxyconf -configmap -out deploy/kubernetes/proxy-config.yaml
