// Package version reports which build of dynmig is running: the module
// version and the VCS revision the Go toolchain stamped into the binary,
// or the values a release build sets with -ldflags -X.
//
// A release build sets both with
//
//	go build -ldflags "-X github.com/dynmig/dynmig/internal/version.Version=v0.1.0 -X github.com/dynmig/dynmig/internal/version.Revision=$(git rev-parse HEAD)"
//
// `go install github.com/dynmig/dynmig/cmd/migctl@v0.1.0` needs neither:
// the toolchain records the module version. The functions are safe for
// concurrent use.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Revision override what the build information says when set
// at link time.
var (
	Version  string
	Revision string
)

// Info is what a binary knows about its own build.
type Info struct {
	Version  string // module version, "(devel)" for a build from a checkout
	Revision string // VCS revision, "" when not recorded
	Modified bool   // the checkout had uncommitted changes
	Go       string // the Go toolchain's version
}

// Get returns the running binary's build information.
func Get() Info {
	info := Info{Version: "(devel)", Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if Version != "" {
		info.Version = Version
	}
	if Revision != "" {
		info.Revision = Revision
	}
	return info
}

// String returns the build information as one line, for instance
// "v0.1.0 (revision 0123abc, go1.26.8)".
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	} else if len(rev) > 12 {
		rev = rev[:12]
	}
	if i.Modified {
		rev += "+modified"
	}
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, rev, i.Go)
}
