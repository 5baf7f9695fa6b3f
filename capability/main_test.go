package capability_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Nothing in the package starts goroutines; goleak keeps it that way.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
