package capability

import "bytes"

// DecodeNodeRegistrationStrict exposes the strict decoder, without the
// canonical fast path, so tests can check that both agree.
var DecodeNodeRegistrationStrict = func(data []byte) ([]NodeDevice, error) {
	data = bytes.Trim(data, jsonSpace)
	if len(data) == 0 {
		return nil, nil
	}
	return decodeNodeRegistrationStrict(data)
}
