package extender

// ReportedClaims returns how many reported stale claims the extender
// remembers.
func (e *Extender) ReportedClaims() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.reported)
}
