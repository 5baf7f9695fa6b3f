// Package archtest holds the tests that keep the module's layering: the
// arrows of CONTRIBUTING.md's architecture table point down only, and
// internal/ stays in its two levels (leaf helpers in internal/leaf, the
// binaries' shared wiring in internal/wiring, which no library package
// imports). It also keeps library functions short (TestFunctionLength: at
// most 60 lines, from the func keyword to the closing brace, with no
// exceptions). It has no code of its own; go test ./internal/archtest runs
// the checks.
package archtest
