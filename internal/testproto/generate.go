// Package testproto holds the echo namespace that the kernel's tests and
// benchmarks use; its code is generated from schemas/echo.json by aepgen.
package testproto

//go:generate go run ../../tools/aepgen -schemas schemas -out . -pkg testproto
