//go:build cgo

package backend

import (
	"context"
	"log/slog"

	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvcdigen"
	"github.com/dynmig/dynmig/realize"
)

// The NVML backend needs cgo (go-nvml); without cgo only the fake backend
// is offered.
func init() {
	openers["nvml"] = openNVML
	newNVCDI = openNVCDI
}

func openNVCDI(o CDIOptions) (CDIGenerator, error) {
	return nvcdigen.New(nvcdigen.Options{DriverRoot: o.DriverRoot, HookPath: o.HookPath, Logger: o.Logger})
}

func openNVML(ctx context.Context, _ string, log *slog.Logger) (realize.Realizer, func(), error) {
	b := nvmlhal.New(nvmlhal.Options{Logger: log})
	if err := b.Init(ctx); err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Shutdown(context.Background()) }, nil
}
