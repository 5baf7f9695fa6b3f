// Package archtest holds the test that keeps the module's layering: the
// arrows of CONTRIBUTING.md's architecture table point down only. It has
// no code of its own; go test ./internal/archtest runs the check.
package archtest
