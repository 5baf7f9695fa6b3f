package testwait_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/dynmig/dynmig/internal/leaf/testwait"
)

func TestBoundFollowsTheTimeoutFlag(t *testing.T) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		t.Fatal("testing registered no test.timeout flag")
	}
	old := f.Value.String()
	t.Cleanup(func() { _ = f.Value.Set(old) })

	tests := []struct {
		name     string
		timeout  string
		min, max time.Duration
	}{
		{name: "no timeout", timeout: "0s", min: testwait.NoTimeout, max: testwait.NoTimeout},
		{name: "ten minutes", timeout: "10m", min: time.Minute, max: 10 * time.Minute},
		{name: "deadline already near", timeout: "1ns", min: time.Second, max: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := f.Value.Set(tt.timeout); err != nil {
				t.Fatal(err)
			}
			got := testwait.Bound()
			if got < tt.min || got > tt.max {
				t.Errorf("Bound() with -timeout %s = %v, want within [%v, %v]", tt.timeout, got, tt.min, tt.max)
			}
		})
	}
}

func ExampleBound() {
	// In TestMain, after flag.Parse: waits end shortly before -timeout.
	flag.Parse()
	fmt.Println(testwait.Bound() >= time.Second)
	// Output: true
}
