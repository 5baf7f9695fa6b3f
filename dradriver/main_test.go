package dradriver_test

import (
	"testing"

	"go.uber.org/goleak"
	// rapid defines its -rapid.* flags in its init, so only test binaries
	// that link it accept them: linked here, go test ./... -rapid.checks=N
	// runs this package too.
	_ "pgregory.net/rapid"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
