//go:build cgo

package backend

import (
	"context"
	"log/slog"

	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/realize"
)

// The NVML backend needs cgo (go-nvml); without cgo only the fake backend
// is offered.
func init() { openers["nvml"] = openNVML }

func openNVML(ctx context.Context, _ string, log *slog.Logger) (realize.Realizer, func(), error) {
	b := nvmlhal.New(nvmlhal.Options{Logger: log})
	if err := b.Init(ctx); err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Shutdown(context.Background()) }, nil
}
