//go:build cgo

package main

import (
	"context"
	"log/slog"

	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/realize"
)

// The NVML backend needs cgo (go-nvml); without cgo the binary offers only
// the fake backend.
func init() { backends["nvml"] = nvmlBackend }

func nvmlBackend(ctx context.Context, log *slog.Logger) (realize.Realizer, func(), error) {
	b := nvmlhal.New(nvmlhal.Options{Logger: log})
	if err := b.Init(ctx); err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Shutdown(context.Background()) }, nil
}
