// Package readme holds the Go snippets of the repository's README.md and
// docs/*.md as code that compiles, so they cannot drift from the API. Each
// snippet sits between a "// readme:begin NAME" and a "// readme:end" line
// in snippets.go; TestREADMESnippets checks that every ```go block of those
// files is one of these regions, byte for byte once the region's
// indentation is removed, and that every region appears in one of them.
//
// To change a snippet, edit it here first, then paste the region (without
// its leading tab) into the markdown file; the test prints the block that
// differs.
//
// Its tests also keep the documentation navigable: every relative link of
// README.md and docs/*.md names a file or directory of the repository
// (and, for a link into a markdown file, one of its headings), and
// README.md stays a front page of at most 320 lines.
//
// The functions are the snippets' scaffolding: they declare what a snippet
// takes from its surroundings (a client, a node name, a pod) and stand in
// for "your code" with this module's own implementations. They are
// compiled; only the scheduler snippet also runs, in the Example. Nothing
// here is a model, so there are no units or intervals; nothing starts
// goroutines except the device-plugin snippet, whose goroutines end with
// its ctx.
package readme
