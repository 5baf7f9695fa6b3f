package nvmlhal_test

import (
	"testing"

	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize/realizetest"
)

// The backend over the strict mocks follows realizetest's reference model
// of the NVML rules through random sequences of creates, destroys and
// processes, on one model per grid width (4, 8 and 12 slots; the fixed
// conformance checks cover every model, and the mock's calls are slow
// under -race). Each run ends with the GPU empty again, so the runs of one
// model share one mock server.
func TestStateMachine(t *testing.T) {
	for _, model := range []nvmlmock.Model{nvmlmock.A30, nvmlmock.DGXA100, nvmlmock.RTXPro6000} {
		t.Run(model.String(), func(t *testing.T) {
			b := conformanceBackend(t, model, nvmlmock.Options{})
			realizetest.TestStateMachine(t, func() (realizetest.Backend, error) { return b, nil })
		})
	}
}
