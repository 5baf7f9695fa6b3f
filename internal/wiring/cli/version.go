package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; see the package documentation.
var (
	version  string
	revision string
)

// Build is what a binary reports for -version.
type Build struct {
	// Module is the main module's path.
	Module string
	// Version is the module version: the linker's, else the build
	// info's ("(devel)" for a build from a source tree).
	Version string
	// Revision is the VCS revision, "" when unknown; Modified reports a
	// tree with uncommitted changes.
	Revision string
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// BuildVersion reads the running binary's build.
func BuildVersion() Build {
	b := Build{Module: "github.com/dynmig/dynmig", Version: "(devel)", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			b.Module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if revision != "" {
		b.Revision, b.Modified = revision, false
	}
	return b
}

// String is one line: "MODULE VERSION (revision R[, modified]) GOVERSION".
func (b Build) String() string {
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	}
	if b.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("%s %s (revision %s) %s", b.Module, b.Version, rev, b.GoVersion)
}

// PrintVersion writes "NAME " and the build's line to w.
func PrintVersion(w io.Writer, name string) error {
	_, err := fmt.Fprintf(w, "%s %s\n", name, BuildVersion())
	return err
}
