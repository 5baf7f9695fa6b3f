package devconfig_test

import (
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/internal/wiring/devconfig"
)

// A config with a malformed profile name is refused with the file and the
// entry named; a good one gives its allowlist.
func ExampleParse() {
	a, err := devconfig.Parse("device-config.yaml", []byte("nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb]\n"))
	fmt.Println(a, err)
	_, err = devconfig.Parse("device-config.yaml", []byte("nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [big]\n"))
	fmt.Println(errors.Is(err, devconfig.ErrRefused))
	// Output:
	// [{[A30] [1g.6gb]}] <nil>
	// true
}
