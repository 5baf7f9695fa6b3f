package capability

import (
	"errors"
	"fmt"
)

// Sentinels callers branch on with errors.Is.
var (
	// ErrConfig is wrapped by every [*ConfigError]: the scheduler device
	// config (or its legacy section) is malformed.
	ErrConfig = errors.New("capability: invalid device config")
	// ErrLegacyConfig marks a device config that carries the v2.9
	// nvidia.knownMigGeometries but no nvidia.migProfileAllowlist. Convert it
	// with `migctl convert-legacy` or [ConvertLegacy]. Errors matching it
	// also match [ErrConfig].
	ErrLegacyConfig = errors.New("capability: legacy nvidia.knownMigGeometries without nvidia.migProfileAllowlist")
	// ErrRegistration is wrapped by every [*RegistrationError]: a
	// hami.io/node-nvidia-register value is malformed or invalid.
	ErrRegistration = errors.New("capability: invalid node registration")
)

// ConfigError reports one problem in a scheduler device config, naming where
// it is. It matches [ErrConfig] and, when set, Err with errors.Is and
// errors.As (Err is a [*ProfileNameError] for malformed profile names and
// [ErrLegacyConfig] for an unconverted legacy config).
type ConfigError struct {
	// Path is the location in the document, for example
	// "nvidia.migProfileAllowlist[2].profiles[1]"; "" is the document root.
	Path string
	// Entry is the index of the list entry (in migProfileAllowlist or
	// knownMigGeometries) the problem is in, or -1 when it is outside any.
	Entry int
	// Field is the part of Path inside that entry, for example
	// "profiles[1]", or "" when the entry itself (or no entry) is at fault.
	Field string
	// Reason says what is wrong.
	Reason string
	// Err is the underlying cause, or nil.
	Err error
}

func (e *ConfigError) Error() string {
	where := e.Path
	if where == "" {
		where = "document"
	}
	msg := fmt.Sprintf("capability: device config %s: %s", where, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns [ErrConfig] and Err.
func (e *ConfigError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrConfig}
	}
	return []error{ErrConfig, e.Err}
}

// RegistrationError reports one problem in a hami.io/node-nvidia-register
// value. It matches [ErrRegistration] and, when set, Err.
type RegistrationError struct {
	// Device is the position of the device object in the array, or -1 when
	// the problem is with the array itself.
	Device int
	// Field is the path inside the device object, for example
	// "migProfiles[1].placements[0].size", or "" for the whole object.
	Field string
	// Reason says what is wrong.
	Reason string
	// Err is the underlying cause, or nil.
	Err error
}

func (e *RegistrationError) Error() string {
	where := "array"
	if e.Device >= 0 {
		where = fmt.Sprintf("device %d", e.Device)
		if e.Field != "" {
			where += " " + e.Field
		}
	}
	msg := fmt.Sprintf("capability: node registration %s: %s", where, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns [ErrRegistration] and Err.
func (e *RegistrationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrRegistration}
	}
	return []error{ErrRegistration, e.Err}
}

// HardwareError wraps an error returned by a [HardwareView] during
// [Discover] with the GPU it concerns. It unwraps to the view's error.
type HardwareError struct {
	Op  string // "Devices" or "GIProfiles"
	GPU int    // NVML device index, -1 for Devices
	Err error
}

func (e *HardwareError) Error() string {
	if e.GPU < 0 {
		return fmt.Sprintf("capability: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("capability: %s on GPU %d: %v", e.Op, e.GPU, e.Err)
}

// Unwrap returns the hardware view's error.
func (e *HardwareError) Unwrap() error { return e.Err }
