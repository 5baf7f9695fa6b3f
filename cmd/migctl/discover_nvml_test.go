//go:build cgo

package main

import (
	"testing"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

func TestDiscoverNVML(t *testing.T) {
	defer func() { nvmlLibrary = nil }()
	nvmlLibrary = nvmlmock.New(nvmlmock.A30, nvmlmock.Options{})
	migctl(t, "", "discover", "--nvml").check(t, exitOK, []string{`GPU 7 "NVIDIA A30" (driver 580.65.06): preset "NVIDIA A30": matches`, "not checked: compute instance profiles"}, nil)

	nvmlLibrary = nvmlmock.New(nvmlmock.DGXB200, nvmlmock.Options{Driver: fakehal.DriverEarly})
	migctl(t, "", "discover", "--nvml").check(t, exitOK, []string{`(early drivers' table)`}, nil)

	migctl(t, "", "discover", "--nvml", "--fake", "A30").check(t, exitUsage, nil, []string{"exclude each other"})
}
