package version_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/internal/version"
)

func TestGet(t *testing.T) {
	i := version.Get()
	if i.Version == "" || i.Go != runtime.Version() {
		t.Errorf("Get() = %+v, want a version and the running toolchain", i)
	}
}

func TestOverride(t *testing.T) {
	defer func(v, r string) { version.Version, version.Revision = v, r }(version.Version, version.Revision)
	version.Version, version.Revision = "v9.9.9", "0123456789abcdef0123"
	i := version.Get()
	if i.Version != "v9.9.9" || i.Revision != "0123456789abcdef0123" {
		t.Errorf("Get() = %+v, want the link-time values", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "v9.9.9 (revision 0123456789ab, ") {
		t.Errorf("String() = %q", s)
	}
}
