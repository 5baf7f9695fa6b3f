//go:build !cgo

package main

import "errors"

// discoverNVML needs go-nvml, which needs cgo.
func discoverNVML(*env) error {
	return errors.New("discover --nvml: this migctl was built without cgo; rebuild with CGO_ENABLED=1 to read NVML")
}
