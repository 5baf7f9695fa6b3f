package nvmlhal_test

import (
	"testing"

	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize/realizetest"
)

// The backend over every strict mock follows realizetest's reference model
// of the NVML rules through random sequences of creates, destroys and
// processes.
func TestStateMachine(t *testing.T) {
	for _, model := range nvmlmock.Models {
		t.Run(model.String(), func(t *testing.T) {
			realizetest.TestStateMachine(t, func() (realizetest.Backend, error) {
				return conformanceBackend(t, model, nvmlmock.Options{}), nil
			})
		})
	}
}
