package capability

// ReadNodeRegistrationStrict exposes the strict reader, without the
// canonical fast path, so tests can check that both agree.
var ReadNodeRegistrationStrict = func(data []byte) (NodeRegistration, error) {
	return readNodeRegistration(data, false)
}
