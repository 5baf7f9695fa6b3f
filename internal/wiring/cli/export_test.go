package cli

import "time"

// SetNow sets the clock m reads when it decides to log a failure again.
func SetNow(m *APIMonitor, now func() time.Time) { m.now = now }
